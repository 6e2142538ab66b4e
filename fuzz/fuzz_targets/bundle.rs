//! Any bytes as a Bundle: its kind and entries read or refused with a
//! documented kind, each entry's operation named or answered 404/405, its
//! cost counted, and each operation's Parameters read or refused — never a
//! panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vfps_core::ErrorKind;
use vfps_fhir::{bundle, json, parameters};

fuzz_target!(|body: &[u8]| {
    let Ok(value) = json::strict(body) else {
        return;
    };
    match bundle::entries(&value) {
        Ok((_, entries)) => {
            let _ = bundle::too_costly(entries);
            for entry in entries {
                match bundle::operation_of(entry) {
                    Ok((op, resource)) => {
                        let (required, optional) = op.params();
                        if let Err(e) = parameters::read(resource, required, optional) {
                            assert_eq!(e.kind, ErrorKind::InvalidArgument, "{e:?}");
                        }
                    }
                    Err(u) => assert!(u.status == 404 || u.status == 405, "{u:?}"),
                }
            }
        }
        Err(e) => assert!(
            matches!(e.kind, ErrorKind::InvalidArgument | ErrorKind::OutOfRange),
            "{e:?}"
        ),
    }
});
