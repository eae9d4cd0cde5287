//! What `execute` gets ([`Execution`]), and the host's way to cancel a batch
//! ([`CancelToken`]).

use std::future::Future;
use std::sync::{Arc, Weak};

use serde_json::Value;
use tokio::sync::watch;

use super::batch::RunKey;
use super::errors::Abort;
use super::inner::Inner;

/// One entry to run: what `execute` is called with. It lives as long as the execution.
#[derive(Debug)]
pub struct Execution {
    pub(crate) entry: u64,
    pub(crate) label: String,
    pub(crate) call_id: String,
    pub(crate) tool: String,
    pub(crate) operation: Option<u32>,
    pub(crate) arguments: Value,
    pub(crate) abort: watch::Receiver<Option<Abort>>,
    pub(crate) driver: Weak<Inner>,
    pub(crate) key: RunKey,
}

impl Execution {
    /// The entry number (unique over the scheduler's life).
    pub fn entry(&self) -> u64 {
        self.entry
    }

    /// `id`, or `id#i` for an operation of a fan-out call.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The call's id.
    pub fn call_id(&self) -> &str {
        &self.call_id
    }

    /// The call's tool.
    pub fn tool(&self) -> &str {
        &self.tool
    }

    /// The operation index of a fan-out call's entry.
    pub fn operation(&self) -> Option<u32> {
        self.operation
    }

    /// The call's arguments as given to `run` (`Null` when none; after a restart, what
    /// `arguments_of` gave back).
    pub fn arguments(&self) -> &Value {
        &self.arguments
    }

    /// Whether the driver aborted this execution, and why.
    pub fn abort_reason(&self) -> Option<Abort> {
        self.abort.borrow().clone()
    }

    /// Completes once the driver aborts this execution (its batch was cancelled or failed, its
    /// deadline passed, the driver closed), with the reason; never completes otherwise. Race
    /// it against the work (`tokio::select!`) and return `Err(reason.into())`: an execution
    /// that ignores it keeps its slot until it ends (or its batch's abort grace gives up on it).
    pub fn cancelled(&self) -> impl Future<Output = Abort> + Send + 'static {
        let mut abort = self.abort.clone();
        async move {
            let reason = abort
                .wait_for(Option::is_some)
                .await
                .map(|reason| reason.clone().unwrap_or(Abort::Cancelled));
            match reason {
                Ok(reason) => reason,
                // The driver forgot the execution (it was given up): nothing aborts it now.
                Err(_) => std::future::pending().await,
            }
        }
    }

    /// Runs `answer` (a user prompt) while the tool waits on a question: the execution keeps
    /// its slot, and the scheduler knows it waits on a person, not on the tool. Overlapping
    /// questions are one wait. A question asked after the execution was aborted runs
    /// unreported.
    pub async fn question<F: Future>(&self, answer: F) -> F::Output {
        let reported = self
            .driver
            .upgrade()
            .is_some_and(|inner| inner.ask(self.key));
        let _answered = Answered {
            driver: if reported {
                self.driver.clone()
            } else {
                Weak::new()
            },
            key: self.key,
        };
        answer.await
    }
}

/// Reports a question's answer when the question ends (also when its future is dropped).
struct Answered {
    driver: Weak<Inner>,
    key: RunKey,
}

impl Drop for Answered {
    fn drop(&mut self) {
        if let Some(inner) = self.driver.upgrade() {
            inner.answered(self.key);
        }
    }
}

/// Cancels a batch from outside ([`RunOptions::cancel`](super::RunOptions)): its parked
/// entries are settled `cancelled`, its running executions are aborted, and its
/// [`Run`](super::Run) still resolves with every outcome once they ended. Cheap to clone; one
/// token may cancel several batches.
#[derive(Clone, Debug)]
pub struct CancelToken {
    sender: Arc<watch::Sender<bool>>,
}

impl CancelToken {
    /// A token not cancelled yet.
    pub fn new() -> Self {
        Self {
            sender: Arc::new(watch::Sender::new(false)),
        }
    }

    /// Cancels every batch run with this token (once; later calls change nothing).
    pub fn cancel(&self) {
        self.sender.send_replace(true);
    }

    /// Whether [`cancel`](Self::cancel) was called.
    pub fn is_cancelled(&self) -> bool {
        *self.sender.borrow()
    }

    /// Completes once the token is cancelled.
    pub fn cancelled(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut rx = self.sender.subscribe();
        async move {
            // The sender lives in `self`'s Arc, which the future does not hold: a token dropped
            // everywhere is never cancelled.
            if rx.wait_for(|c| *c).await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }
}

impl Default for CancelToken {
    fn default() -> Self {
        Self::new()
    }
}
