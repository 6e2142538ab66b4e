//! The `aws-kms:` key source against moto's KMS and STS (the stand-in for
//! AWS behind the real client code): data keys made by `GenerateDataKey`
//! and opened by `Decrypt`, bound to their context, refused under another
//! key (by KMS too), credentials from a web identity through
//! STS (IRSA), an unreachable KMS told as unavailable.

use std::collections::HashMap;

use vfps_core::{ErrorKind, NamespaceUid};
use vfps_keys::{source::KeySource, NamespaceKeys, WrappedKeys};

fn source(arn: &str, env: &HashMap<String, String>) -> KeySource {
    KeySource::parse_with(&format!("aws-kms:{arn}"), &|k| env.get(k).cloned())
        .unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kms_makes_and_opens_data_keys_bound_to_their_place() {
    let moto = vfps_testkit::moto::Moto::start();
    let arn = moto.kms_key();
    let env: HashMap<String, String> = moto.env().into_iter().collect();
    let wrap = source(&arn, &env).open().unwrap();
    assert_eq!(wrap.key_id(), arn);
    assert!(wrap.describe().contains(&arn), "{}", wrap.describe());
    let uid = NamespaceUid(7);
    let (keys, wrapped) = NamespaceKeys::generate(uid, 1, wrap.as_ref())
        .await
        .unwrap();
    assert_eq!(wrapped.wrapped_by, arn);
    // Another process's view opens it: the same keys.
    let again = source(&arn, &env).open().unwrap();
    let opened = NamespaceKeys::unwrap(&wrapped, again.as_ref())
        .await
        .unwrap();
    assert_eq!(opened.index("patient-1"), keys.index("patient-1"));
    let sealed = keys.seal("P-1", "patient-1").unwrap();
    assert_eq!(opened.open("P-1", &sealed).unwrap(), "patient-1");
    // Moved to another namespace: KMS refuses the context.
    let moved = WrappedKeys {
        uid: NamespaceUid(8),
        ..wrapped.clone()
    };
    let e = NamespaceKeys::unwrap(&moved, again.as_ref())
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::FailedPrecondition, "{e:?}");
    assert!(e.message.contains("does not unwrap"), "{}", e.message);
    // The wrapped data key where the index key goes: refused.
    let swapped = WrappedKeys {
        data: wrapped.index.clone(),
        index: wrapped.data.clone(),
        ..wrapped.clone()
    };
    assert!(NamespaceKeys::unwrap(&swapped, again.as_ref())
        .await
        .is_err());
    // A wrap (re-wrapping, on rotation of the KMS key) round-trips too.
    let data = [9u8; 32];
    let blob = again.wrap(&data, b"ctx").await.unwrap();
    assert_eq!(again.unwrap(&blob, b"ctx").await.unwrap(), data);
    assert!(again.unwrap(&blob, b"other").await.is_err());

    // Credentials from a web identity through STS (what IRSA gives a pod).
    let token = vfps_testkit::scratch_dir("kms-irsa").join("token");
    std::fs::write(&token, "eyJhbGciOiJSUzI1NiJ9.e30.c2ln").unwrap();
    let irsa: HashMap<String, String> = [
        ("AWS_WEB_IDENTITY_TOKEN_FILE", token.display().to_string()),
        (
            "AWS_ROLE_ARN",
            "arn:aws:iam::123456789012:role/vfps".to_owned(),
        ),
        ("AWS_ENDPOINT_URL_STS", moto.endpoint.clone()),
        ("AWS_ENDPOINT_URL_KMS", moto.endpoint.clone()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let by_role = source(&arn, &irsa).open().unwrap();
    NamespaceKeys::unwrap(&wrapped, by_role.as_ref())
        .await
        .unwrap();

    // Another KMS key does not open it.
    let other = moto.kms_key();
    let e = NamespaceKeys::unwrap(&wrapped, source(&other, &env).open().unwrap().as_ref())
        .await
        .unwrap_err();
    assert!(e.message.contains("wrapped by key"), "{}", e.message);
    // KMS itself refuses a key's blob asked of another key, named.
    let e = source(&other, &env)
        .open()
        .unwrap()
        .unwrap(&blob, b"ctx")
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::FailedPrecondition, "{e:?}");
    assert!(
        e.message.contains(&other) && e.message.contains("AccessDeniedException"),
        "{}",
        e.message
    );
    // KMS unreachable: unavailable (worth retrying), not a wrong key.
    let port = vfps_testkit::free_port().unwrap();
    let mut down = env.clone();
    down.insert(
        "AWS_ENDPOINT_URL_KMS".into(),
        format!("http://127.0.0.1:{port}"),
    );
    let e = NamespaceKeys::generate(uid, 2, source(&arn, &down).open().unwrap().as_ref())
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unavailable, "{e:?}");
}

#[test]
fn kms_settings_are_refused_by_name() {
    let none: HashMap<String, String> = HashMap::new();
    let get = |k: &str| none.get(k).cloned();
    let e = KeySource::parse_with("aws-kms:my-key", &get).unwrap_err();
    assert!(e.contains("is not a KMS key ARN"), "{e}");
    let arn = "arn:aws:kms:eu-central-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab";
    let e = KeySource::parse_with(&format!("aws-kms:{arn}"), &get).unwrap_err();
    assert!(e.contains("needs AWS credentials"), "{e}");
    let half: HashMap<String, String> = [("AWS_ACCESS_KEY_ID".to_owned(), "AKIA".to_owned())]
        .into_iter()
        .collect();
    let e =
        KeySource::parse_with(&format!("aws-kms:{arn}"), &|k| half.get(k).cloned()).unwrap_err();
    assert!(e.contains("AWS_SECRET_ACCESS_KEY is required"), "{e}");
    let full: HashMap<String, String> = [
        ("AWS_ACCESS_KEY_ID".to_owned(), "AKIA".to_owned()),
        ("AWS_SECRET_ACCESS_KEY".to_owned(), "s3cr3t".to_owned()),
    ]
    .into_iter()
    .collect();
    let KeySource::AwsKms(kms) =
        KeySource::parse_with(&format!("aws-kms:{arn}"), &|k| full.get(k).cloned()).unwrap()
    else {
        panic!("not a KMS source")
    };
    assert_eq!(kms.endpoint, "https://kms.eu-central-1.amazonaws.com");
    assert_eq!(kms.region, "eu-central-1");
    assert!(!format!("{kms:?}").contains("s3cr3t"), "{kms:?}");
}
