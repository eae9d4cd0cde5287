//! The `simulate` interface: the engine's timeline on a virtual clock, with its conversions.

use turnstile_engine::config::Layer;
use turnstile_engine::simulate::{self, Error, Input};

use crate::Component;
use crate::exports::turnstile::scheduler::simulate as wit;

impl wit::Guest for Component {
    fn run(input: wit::Input) -> Result<String, wit::Error> {
        let layer = |l: crate::wit_config::Layer| Layer {
            name: l.name,
            text: l.text,
        };
        let input = Input {
            file: input.file.map(|f| (f.name, f.text)),
            layers: input.layers.into_iter().map(layer).collect(),
            calls: input.calls,
            duration_ms: input.duration_ms,
            durations: input.durations,
            fail: input.fail,
        };
        simulate::run(&input).map_err(|e| match e {
            Error::NotACase(why) => wit::Error::NotACase(why),
            Error::Config(diagnostics) => wit::Error::Config(
                diagnostics
                    .into_iter()
                    .map(crate::convert::diagnostic)
                    .collect(),
            ),
            Error::Calls(why) => wit::Error::Calls(why),
            Error::Nothing(why) => wit::Error::Nothing(why),
            Error::Input(why) => wit::Error::Input(why),
        })
    }

    fn help(program: String) -> String {
        simulate::help(&program)
    }
}
