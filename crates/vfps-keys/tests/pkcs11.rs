//! The `pkcs11:` key source on a real PKCS#11 token (SoftHSM2): the master
//! key is made on the token and never leaves it, data keys wrap and unwrap
//! through it, and every mistake is named. One test: the token's
//! configuration is this process's environment.

use cryptoki::{
    context::{CInitializeArgs, CInitializeFlags, Pkcs11},
    object::{Attribute, AttributeType, ObjectClass},
    session::UserType,
    types::AuthPin,
};
use vfps_keys::{source::KeySource, NamespaceKeys};

#[tokio::test]
async fn a_key_on_a_pkcs11_token_wraps_data_keys_and_never_leaves_it() {
    let token = vfps_testkit::softhsm::Token::new("vfps-keys-test");
    let uri = token.uri("vfps-master");
    let KeySource::Pkcs11(p11) = KeySource::parse(&uri).unwrap() else {
        panic!("{uri} is not a pkcs11 source")
    };
    // No key yet: named, with what makes one.
    let e = KeySource::parse(&uri).unwrap().open().err().unwrap();
    assert!(
        e.message.contains("no key labelled") && e.message.contains("vfps keys init"),
        "{}",
        e.message
    );
    let id = p11.init().unwrap();
    assert_eq!(id.len(), 16, "{id}");
    let e = p11.init().unwrap_err();
    assert!(e.message.contains("never replaced"), "{}", e.message);

    let wrap = KeySource::parse(&uri).unwrap().open().unwrap();
    assert_eq!(wrap.key_id(), id);
    assert!(!wrap.describe().contains(&token.pin), "{}", wrap.describe());
    let uid = vfps_core::NamespaceUid(42);
    let (keys, wrapped) = NamespaceKeys::generate(uid, 1, wrap.as_ref())
        .await
        .unwrap();
    assert_eq!(wrapped.wrapped_by, id);
    // Another process's view: the same token opens what this one wrapped.
    let again = KeySource::parse(&uri).unwrap().open().unwrap();
    let opened = NamespaceKeys::unwrap(&wrapped, again.as_ref())
        .await
        .unwrap();
    assert_eq!(opened.index("patient-1"), keys.index("patient-1"));
    let sealed = keys.seal("P-1", "patient-1").unwrap();
    assert_eq!(opened.open("P-1", &sealed).unwrap(), "patient-1");
    // A wrapped key altered, or moved to another namespace, does not unwrap.
    let mut altered = wrapped.clone();
    *altered.data.last_mut().unwrap() ^= 1;
    assert!(NamespaceKeys::unwrap(&altered, again.as_ref())
        .await
        .is_err());
    let moved = vfps_keys::WrappedKeys {
        uid: vfps_core::NamespaceUid(43),
        ..wrapped.clone()
    };
    assert!(NamespaceKeys::unwrap(&moved, again.as_ref()).await.is_err());

    // The key's bytes cannot be read off the token.
    let ctx = Pkcs11::new(vfps_testkit::softhsm::MODULE).unwrap();
    let _ = ctx.initialize(CInitializeArgs::new(CInitializeFlags::OS_LOCKING_OK));
    let slot = ctx.get_slots_with_token().unwrap()[0];
    let session = ctx.open_ro_session(slot).unwrap();
    let _ = session.login(UserType::User, Some(&AuthPin::from(token.pin.clone())));
    let key = session
        .find_objects(&[
            Attribute::Class(ObjectClass::SECRET_KEY),
            Attribute::Label(b"vfps-master".to_vec()),
        ])
        .unwrap()[0];
    let value = session
        .get_attributes(key, &[AttributeType::Value])
        .unwrap_or_default();
    assert!(
        !value
            .iter()
            .any(|a| matches!(a, Attribute::Value(v) if !v.is_empty())),
        "the master key's value was readable"
    );
    let attrs = session
        .get_attributes(key, &[AttributeType::Sensitive, AttributeType::Extractable])
        .unwrap();
    assert!(attrs.contains(&Attribute::Sensitive(true)), "{attrs:?}");
    assert!(attrs.contains(&Attribute::Extractable(false)), "{attrs:?}");

    // Mistakes, named: a wrong PIN, an unknown token, a URI missing parts.
    let wrong_pin = format!(
        "pkcs11:token={};object=vfps-master?module-path={}&pin-value=0000",
        token.label,
        vfps_testkit::softhsm::MODULE
    );
    // (This process is logged in through the sessions above: a wrong PIN
    // is told in a process of its own, by the server's test.)
    let parsed = KeySource::parse(&wrong_pin).unwrap();
    assert!(!format!("{parsed:?}").contains("0000"), "{parsed:?}");
    let unknown = uri.replace("token=vfps-keys-test", "token=nope");
    let e = KeySource::parse(&unknown).unwrap().open().err().unwrap();
    assert!(
        e.message.contains("no token labelled \"nope\""),
        "{}",
        e.message
    );
    let e = KeySource::parse("pkcs11:token=t?pin-value=1234").unwrap_err();
    assert!(e.contains("object=") && e.contains("module-path="), "{e}");
    assert!(!e.contains("1234"), "{e}");
    let e = KeySource::parse("pkcs11:token=t;object=o;color=red?module-path=/m").unwrap_err();
    assert!(e.contains("color=red"), "{e}");
    let e = KeySource::parse("vault:secret/x?token=abc").unwrap_err();
    assert!(!e.contains("abc") && e.contains("pkcs11:"), "{e}");
}
