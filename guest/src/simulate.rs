//! The `simulate` interface: the engine's timeline on a virtual clock, with its conversions.

use turnstile_engine::config::Layer;
use turnstile_engine::simulate::{self, Error, Input};

use crate::Component;
use crate::exports::turnstile::scheduler::simulate as wit;

impl wit::Guest for Component {
    fn run(input: wit::Input) -> Result<wit::Simulated, wit::Error> {
        let layer = |l: crate::wit_config::Layer| Layer {
            name: l.name,
            text: l.text,
        };
        let input = Input {
            file: input.file.map(|f| (f.name, f.text)),
            layers: input.layers.into_iter().map(layer).collect(),
            calls: input.calls,
            durations: input.durations,
            fail: input.fail,
        };
        let diagnostics = |d: Vec<_>| d.into_iter().map(crate::convert::diagnostic).collect();
        match simulate::run(&input) {
            Ok(s) => Ok(wit::Simulated {
                timeline: s.timeline,
                warnings: diagnostics(s.warnings),
            }),
            Err(Error::NotACase(why)) => Err(wit::Error::NotACase(why)),
            Err(Error::Config(d)) => Err(wit::Error::Config(diagnostics(d))),
            Err(Error::Usage(why)) => Err(wit::Error::Usage(why)),
            Err(Error::Nothing(why)) => Err(wit::Error::Nothing(why)),
            Err(Error::Input(why)) => Err(wit::Error::Input(why)),
        }
    }

    fn help(program: String) -> String {
        simulate::help(&program)
    }
}
