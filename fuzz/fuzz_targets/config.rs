//! Config resolution on arbitrary bytes: split into up to four layers at 0xff, each taken as
//! (lossy) UTF-8. Resolution must return a policy or diagnostics, never panic, and every
//! diagnostic must render and carry spans inside its layer.
#![no_main]

use libfuzzer_sys::fuzz_target;
use turnstile_engine::config::{self, Layer};

fuzz_target!(|data: &[u8]| {
    let layers: Vec<Layer> = data
        .split(|&b| b == 0xff)
        .take(4)
        .enumerate()
        .map(|(i, part)| Layer::new(format!("L{i}"), String::from_utf8_lossy(part).into_owned()))
        .collect();
    if let Err(diags) = config::resolve(&layers) {
        assert!(!diags.is_empty());
        for d in &diags {
            assert!(d.rendered.contains(d.code.as_str()));
            for label in &d.labels {
                let text = &layers[label.span.layer as usize].text;
                assert!(
                    label.span.start <= label.span.end && label.span.end as usize <= text.len()
                );
            }
        }
    }
});
