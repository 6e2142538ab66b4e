//! Any bytes as an MII operation's body, and as upstream's
//! `$create-pseudonym`: read, or refused with `INVALID_ARGUMENT` — never a
//! panic, never another error kind, and a refusal never quotes a value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vfps_core::ErrorKind;
use vfps_fhir::{json, operation::Op, parameters, upstream};

fuzz_target!(|body: &[u8]| {
    if let Ok(value) = json::strict(body) {
        for op in Op::ALL {
            let (required, optional) = op.params();
            if let Err(e) = parameters::read(&value, required, optional) {
                assert_eq!(e.kind, ErrorKind::InvalidArgument, "{op:?}: {e:?}");
            }
        }
    }
    if let Err(e) = upstream::parameters(body) {
        assert_eq!(e.kind, ErrorKind::InvalidArgument, "{e:?}");
    }
});
