//! The public API as a user names it: every engine type the API carries is named through
//! `turnstile::` (a user cannot depend on the engine crate), diagnostics and statuses print,
//! and a pause too long for the clock is refused with a sentence in one unit.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::any::type_name;
use std::time::Duration;

use serde_json::json;
use turnstile::{Driver, DriverOptions, ExecError, HostError, PauseError, Policy, Status};

/// Every engine type reachable from the public API (fields, variants, signatures), by the
/// name this crate gives it. The list is the closure of the API's engine types: a type added
/// to a public signature belongs here.
#[test]
fn every_engine_type_of_the_api_is_named_through_the_crate() {
    let engine = [
        // RunError, PauseError, ResumeError, Resumed
        type_name::<turnstile::SubmitError>(),
        type_name::<turnstile::SubmitErrorCode>(),
        type_name::<turnstile::Refusal>(),
        type_name::<turnstile::About>(),
        type_name::<turnstile::InputErrorCode>(),
        type_name::<turnstile::SavedStateError>(),
        type_name::<turnstile::ResumeErrorCode>(),
        type_name::<turnstile::Unrestored>(),
        type_name::<turnstile::UnrestoredCode>(),
        // Snapshot::state
        type_name::<turnstile::SavedState>(),
        type_name::<turnstile::SavedBatch>(),
        type_name::<turnstile::SavedCall>(),
        type_name::<turnstile::Saved>(),
        type_name::<turnstile::EndOutcome>(),
        type_name::<turnstile::BatchId>(),
        type_name::<turnstile::EntryId>(),
        type_name::<turnstile::Limits>(),
        // Status, LiveBatch, ResumeOptions
        type_name::<turnstile::Reason>(),
        type_name::<turnstile::AbortCause>(),
        type_name::<turnstile::EntryStatus>(),
        type_name::<turnstile::EntryState>(),
        type_name::<turnstile::Wait>(),
        type_name::<turnstile::Started>(),
        // Policy, Diagnostic
        type_name::<turnstile::Layer>(),
        type_name::<turnstile::ToolPolicy>(),
        type_name::<turnstile::Concurrency>(),
        type_name::<turnstile::ConcurrencyKey>(),
        type_name::<turnstile::KeyTemplate>(),
        type_name::<turnstile::OnError>(),
        type_name::<turnstile::RateWindow>(),
        type_name::<turnstile::DiagnosticCode>(),
        type_name::<turnstile::Severity>(),
        type_name::<turnstile::DiagnosticLabel>(),
        type_name::<turnstile::DiagnosticSpan>(),
        // shared::Store
        type_name::<turnstile::shared::Arrival>(),
        type_name::<turnstile::shared::RateWindow>(),
    ];
    for name in engine {
        assert!(name.starts_with("turnstile_engine::"), "{name}");
    }
}

#[test]
fn a_warning_and_an_error_print_like_rustc() {
    let p = Policy::from_toml("p.toml", "[conversation.tools.t]\nconcurency = 2\n").unwrap();
    let warnings: Vec<String> = p.warnings().iter().map(|w| w.to_string()).collect();
    assert_eq!(warnings.len(), 1);
    assert!(
        warnings[0].starts_with("warning[unknown-field-typo]"),
        "{}",
        warnings[0]
    );
    assert!(warnings[0].contains("p.toml:2:1"), "{}", warnings[0]);
    assert_eq!(p.warnings()[0].code.as_str(), "unknown-field-typo");

    let e =
        Policy::from_toml("bad.toml", "[conversation.tools.t]\nconcurrency = -1\n").unwrap_err();
    let first = e.diagnostics[0].to_string();
    assert!(first.starts_with("error[concurrency-negative]"), "{first}");
    assert!(e.to_string().starts_with(&first));
}

#[test]
fn a_status_prints_its_kind_and_what_it_holds() {
    let cases = [
        (Status::Ok(json!({"n": 1})), r#"ok {"n":1}"#),
        (
            Status::Failed(ExecError::Failed(HostError::new("TypeError", "bad path"))),
            "failed TypeError: bad path",
        ),
        (Status::Cancelled(Ok(json!(1))), "cancelled"),
        (
            Status::Settled {
                reason: turnstile::Reason::Rejected,
                message: "not run: the user rejected this call".into(),
                error: None,
            },
            "settled rejected: not run: the user rejected this call",
        ),
    ];
    for (status, text) in cases {
        assert_eq!(status.to_string(), text);
    }
}

#[tokio::test(start_paused = true)]
async fn a_pause_longer_than_the_clock_names_its_parameter_in_ms() {
    let p = Policy::from_toml("p", "[conversation.tools.t]\nconcurrency = 1\n").unwrap();
    let d = Driver::new(&p, DriverOptions::default()).unwrap();
    let e = d
        .pause("t", Duration::from_secs(u64::MAX))
        .await
        .unwrap_err();
    assert!(matches!(e, PauseError::InvalidArgument(_)));
    assert_eq!(
        e.to_string(),
        "pause duration must be at most 18446744073709551615 ms, got 18446744073709551615000 ms"
    );
}
