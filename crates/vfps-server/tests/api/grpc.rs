//! Every RPC and every status code of the wire contract, over gRPC.

use std::collections::HashSet;

use tonic::Code;
use vfps_proto::v1::{
    NamespaceServiceCreateRequest, NamespaceServiceDeleteRequest, NamespaceServiceGetAllRequest,
    NamespaceServiceGetRequest, PseudonymServiceGetRequest, PseudonymServiceListRequest,
};

use crate::helpers::{spawn_app, Backend};

const BASE64URL: i32 = 1;
const SHA256: i32 = 2;
const UUID4: i32 = 3;
const UUID7: i32 = 4;
const HEX: i32 = 5;
const BASE62: i32 = 6;

async fn namespace_rpcs_and_their_status_codes(backend: Backend) {
    let app = spawn_app(backend).await;
    let mut ns = app.namespaces.clone();
    let create = |name: &str, method: i32, length: u32| NamespaceServiceCreateRequest {
        name: name.into(),
        pseudonym_generation_method: method,
        pseudonym_length: length,
        pseudonym_prefix: Some("pre-".into()),
        pseudonym_suffix: None,
        description: "a namespace".into(),
        pseudonym_deletion_allowed: None,
        multi_pseudonym: None,
        original_system: None,
    };
    let created = ns
        .create(create("alpha", UUID4, 36))
        .await
        .unwrap()
        .into_inner();
    let created = created.namespace.unwrap();
    assert_eq!(created.name, "alpha");
    assert_eq!(created.pseudonym_prefix.as_deref(), Some("pre-"));
    // As upstream answers a namespace without one: set, and empty.
    assert_eq!(created.pseudonym_suffix.as_deref(), Some(""));
    assert!(created.meta.unwrap().created_at.is_some());

    fn code<T>(r: Result<tonic::Response<T>, tonic::Status>) -> Code {
        match r {
            Ok(_) => Code::Ok,
            Err(s) => s.code(),
        }
    }
    assert_eq!(
        code(ns.create(create("alpha", UUID4, 36)).await),
        Code::AlreadyExists
    );
    assert_eq!(
        code(ns.create(create("zero", HEX, 0)).await),
        Code::OutOfRange
    );
    assert_eq!(
        code(ns.create(create("sha", SHA256, 32)).await),
        Code::OutOfRange
    );
    assert_eq!(
        code(ns.create(create("uuid", UUID7, 16)).await),
        Code::OutOfRange
    );
    assert_eq!(
        code(ns.create(create("  ", HEX, 8)).await),
        Code::InvalidArgument
    );
    assert_eq!(
        code(ns.create(create("weird", 42, 8)).await),
        Code::InvalidArgument
    );

    // UNSPECIFIED generates as method 1 and is answered as given, as
    // upstream keeps it.
    let unspecified = ns
        .create(create("beta", 0, 16))
        .await
        .unwrap()
        .into_inner()
        .namespace
        .unwrap();
    assert_eq!(unspecified.pseudonym_generation_method, 0);

    let got = ns
        .get(NamespaceServiceGetRequest {
            name: "alpha".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .namespace
        .unwrap();
    assert_eq!(got.description, "a namespace");
    assert_eq!(
        code(
            ns.get(NamespaceServiceGetRequest {
                name: "nope".into()
            })
            .await
        ),
        Code::NotFound
    );

    let all = ns
        .get_all(NamespaceServiceGetAllRequest {})
        .await
        .unwrap()
        .into_inner();
    let names: Vec<_> = all.namespaces.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["alpha", "beta"]);

    ns.delete(NamespaceServiceDeleteRequest {
        name: "beta".into(),
    })
    .await
    .unwrap();
    assert_eq!(
        code(
            ns.delete(NamespaceServiceDeleteRequest {
                name: "beta".into()
            })
            .await
        ),
        Code::NotFound
    );
}

async fn pseudonym_rpcs_and_their_status_codes(backend: Backend) {
    let app = spawn_app(backend).await;
    app.namespace("n", HEX, 16).await;
    let first = app.create("n", "patient-1").await.unwrap();
    assert_eq!(first.original_value.as_deref(), Some("patient-1"));
    assert_eq!(first.namespace, "n");
    let again = app.create("n", "patient-1").await.unwrap();
    assert_eq!(
        again.pseudonym_value, first.pseudonym_value,
        "Create is idempotent"
    );
    assert_eq!(
        app.create("nope", "x").await.unwrap_err().code(),
        Code::NotFound
    );
    assert_eq!(
        app.create("n", "   ").await.unwrap_err().code(),
        Code::InvalidArgument
    );
    assert_eq!(
        app.create("n", "").await.unwrap_err().code(),
        Code::InvalidArgument
    );

    let mut ps = app.pseudonyms.clone();
    let got = ps
        .get(PseudonymServiceGetRequest {
            namespace: "n".into(),
            pseudonym_value: first.pseudonym_value.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .pseudonym
        .unwrap();
    assert_eq!(got.original_value.as_deref(), Some("patient-1"));
    let missing = ps
        .get(PseudonymServiceGetRequest {
            namespace: "n".into(),
            pseudonym_value: "not-a-pseudonym".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Code::NotFound);
}

async fn every_generation_method_has_its_format(backend: Backend) {
    let app = spawn_app(backend).await;
    type FormatCheck = fn(&str) -> bool;
    let cases: [(i32, u32, FormatCheck); 6] = [
        (BASE64URL, 32, |p| {
            p.len() == 54
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        }),
        (SHA256, 64, |p| {
            p == "2CF24DBA5FB0A30E26E83B2AC5B9E29E1B161E5C1FA7425E73043362938B9824"
        }),
        (UUID4, 36, |p| {
            p.len() == 36 && p.as_bytes()[14] == b'4' && p == p.to_lowercase()
        }),
        (UUID7, 36, |p| {
            p.len() == 36 && p.as_bytes()[14] == b'7' && p == p.to_lowercase()
        }),
        (HEX, 20, |p| {
            p.len() == 20
                && p.chars()
                    .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
        }),
        (BASE62, 20, |p| {
            p.len() == 20 && p.chars().all(|c| c.is_ascii_alphanumeric())
        }),
    ];
    for (method, length, valid) in cases {
        let name = format!("m{method}");
        app.namespace(&name, method, length).await;
        let p = app.create(&name, "hello").await.unwrap().pseudonym_value;
        assert!(valid(&p), "method {method} produced {p:?}");
    }
    // UNSPECIFIED generates as method 1 and stays UNSPECIFIED, as upstream
    // keeps it.
    app.namespace("m0", 0, 32).await;
    let p = app.create("m0", "hello").await.unwrap().pseudonym_value;
    assert!(cases[0].2(&p), "method 0 produced {p:?}");
    let got = app
        .namespaces
        .clone()
        .get(vfps_proto::v1::NamespaceServiceGetRequest { name: "m0".into() })
        .await
        .unwrap()
        .into_inner()
        .namespace
        .unwrap();
    assert_eq!(got.pseudonym_generation_method, 0);
}

async fn list_pages_through_everything_without_originals(backend: Backend) {
    let app = spawn_app(backend).await;
    app.namespace("n", HEX, 16).await;
    let mut expected = HashSet::new();
    for i in 0..57 {
        expected.insert(
            app.create("n", &format!("o{i}"))
                .await
                .unwrap()
                .pseudonym_value,
        );
    }
    let mut ps = app.pseudonyms.clone();
    let first = ps
        .list(PseudonymServiceListRequest {
            namespace: "n".into(),
            page_size: 0,
            page_token: String::new(),
            include_total_size: false,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(first.pseudonyms.len(), 25, "page_size <= 0 means 25");
    assert_eq!(first.total_size, None, "total_size only when asked");
    let mut seen = Vec::new();
    let mut token = String::new();
    let mut pages = 0;
    loop {
        let page = ps
            .list(PseudonymServiceListRequest {
                namespace: "n".into(),
                page_size: 10,
                page_token: token,
                include_total_size: true,
            })
            .await
            .unwrap()
            .into_inner();
        pages += 1;
        assert_eq!(page.total_size, Some(57));
        assert_eq!(page.namespace, "n");
        for p in &page.pseudonyms {
            assert!(
                p.original_value.is_none(),
                "List must never carry original values"
            );
            seen.push(p.pseudonym_value.clone());
        }
        if page.next_page_token.is_empty() {
            break;
        }
        assert!(page
            .next_page_token
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'));
        token = page.next_page_token;
    }
    assert_eq!(pages, 6);
    assert_eq!(seen.len(), 57);
    assert_eq!(seen.iter().cloned().collect::<HashSet<_>>(), expected);

    let bad = ps
        .list(PseudonymServiceListRequest {
            namespace: "n".into(),
            page_size: 10,
            page_token: "%%%".into(),
            include_total_size: false,
        })
        .await
        .unwrap_err();
    assert_eq!(bad.code(), Code::InvalidArgument);
    let missing = ps
        .list(PseudonymServiceListRequest {
            namespace: "nope".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Code::NotFound);
}

async fn deleting_a_namespace_deletes_its_pseudonyms(backend: Backend) {
    let app = spawn_app(backend).await;
    app.namespace("n", HEX, 16).await;
    let p = app.create("n", "o").await.unwrap().pseudonym_value;
    app.namespaces
        .clone()
        .delete(NamespaceServiceDeleteRequest { name: "n".into() })
        .await
        .unwrap();
    assert_eq!(
        app.create("n", "o").await.unwrap_err().code(),
        Code::NotFound
    );
    app.namespace("n", HEX, 16).await;
    let gone = app
        .pseudonyms
        .clone()
        .get(PseudonymServiceGetRequest {
            namespace: "n".into(),
            pseudonym_value: p.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(gone.code(), Code::NotFound);
    let fresh = app.create("n", "o").await.unwrap().pseudonym_value;
    assert_ne!(fresh, p, "a recreated namespace starts empty");
}

async fn colliding_pseudonyms_are_regenerated_until_the_space_is_full(backend: Backend) {
    let app = spawn_app(backend).await;
    // Two hex digits: 256 pseudonyms; 100 originals collide often.
    app.namespace("small", HEX, 2).await;
    let mut distinct = HashSet::new();
    for i in 0..100 {
        distinct.insert(
            app.create("small", &format!("o{i}"))
                .await
                .unwrap()
                .pseudonym_value,
        );
    }
    assert_eq!(distinct.len(), 100, "every original has its own pseudonym");
    let metrics = app.metrics_text().await;
    assert!(
        metrics.contains("vfps_pseudonym_collisions_total"),
        "{metrics}"
    );
    assert!(
        !metrics.contains("vfps_pseudonym_collisions_total 0\n"),
        "100 of 256 must have collided"
    );

    // One hex digit: 16 pseudonyms. Fill the space, then a new original cannot get one.
    app.namespace("tiny", HEX, 1).await;
    let mut used = HashSet::new();
    for i in 0..2000 {
        if used.len() == 16 {
            break;
        }
        if let Ok(p) = app.create("tiny", &format!("t{i}")).await {
            used.insert(p.pseudonym_value);
        }
    }
    assert_eq!(used.len(), 16);
    let full = app.create("tiny", "one-too-many").await.unwrap_err();
    assert_eq!(full.code(), Code::ResourceExhausted);
}

async fn health_and_reflection_are_served(backend: Backend) {
    use tonic_health::pb::{
        health_check_response::ServingStatus, health_client::HealthClient, HealthCheckRequest,
    };
    let app = spawn_app(backend).await;
    let channel = tonic::transport::Channel::from_shared(app.grpc.clone())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = HealthClient::new(channel.clone());
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let status = health
            .check(HealthCheckRequest {
                service: "vfps.api.v1.PseudonymService".into(),
            })
            .await
            .map(|r| r.into_inner().status);
        if status.as_ref().ok() == Some(&(ServingStatus::Serving as i32)) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never SERVING: {status:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }

    use tonic_reflection::pb::v1::{
        server_reflection_client::ServerReflectionClient,
        server_reflection_request::MessageRequest, server_reflection_response::MessageResponse,
        ServerReflectionRequest,
    };
    let mut reflection = ServerReflectionClient::new(channel);
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut stream = reflection
        .server_reflection_info(tokio_stream::iter(vec![request]))
        .await
        .unwrap()
        .into_inner();
    let Some(Ok(answer)) = tokio_stream::StreamExt::next(&mut stream).await else {
        panic!("no reflection answer")
    };
    let Some(MessageResponse::ListServicesResponse(list)) = answer.message_response else {
        panic!("unexpected reflection answer")
    };
    let names: Vec<_> = list.service.iter().map(|s| s.name.as_str()).collect();
    for wanted in [
        "vfps.api.v1.NamespaceService",
        "vfps.api.v1.PseudonymService",
        "grpc.health.v1.Health",
    ] {
        assert!(names.contains(&wanted), "{wanted} not in {names:?}");
    }
}

/// Every call starts with 1 KiB buffers each way (`vfps_proto::codec`); larger
/// requests and responses grow them and arrive whole.
async fn messages_larger_than_the_codecs_first_buffer_arrive_whole(backend: Backend) {
    use prost::Message;
    let app = spawn_app(backend).await;
    app.namespace("n", HEX, 16).await;
    let original: String = (0..2048u32)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    assert!(original.len() > vfps_proto::codec::BUFFER_BYTES);
    let created = app.create("n", &original).await.unwrap();
    assert_eq!(created.original_value.as_deref(), Some(original.as_str()));
    let got = app
        .pseudonyms
        .clone()
        .get(PseudonymServiceGetRequest {
            namespace: "n".into(),
            pseudonym_value: created.pseudonym_value.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .pseudonym
        .unwrap();
    assert_eq!(got.original_value.as_deref(), Some(original.as_str()));

    for i in 0..199 {
        app.create("n", &format!("o{i}")).await.unwrap();
    }
    let page = app
        .pseudonyms
        .clone()
        .list(PseudonymServiceListRequest {
            namespace: "n".into(),
            page_size: 200,
            page_token: String::new(),
            include_total_size: true,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(page.pseudonyms.len(), 200);
    assert!(page.encoded_len() > 8 * vfps_proto::codec::BUFFER_BYTES);
    assert!(page
        .pseudonyms
        .iter()
        .any(|p| p.pseudonym_value == created.pseudonym_value));
}

/// Bytes as they are, for requests no generated client would send.
#[derive(Debug, Clone, Default)]
struct RawCodec;

impl tonic::codec::Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = RawCodec;
    type Decoder = RawCodec;
    fn encoder(&mut self) -> Self {
        Self
    }
    fn decoder(&mut self) -> Self {
        Self
    }
}

impl tonic::codec::Encoder for RawCodec {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn encode(
        &mut self,
        item: Vec<u8>,
        buf: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        prost::bytes::BufMut::put_slice(buf, &item);
        Ok(())
    }
}

impl tonic::codec::Decoder for RawCodec {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn decode(
        &mut self,
        buf: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<Vec<u8>>, tonic::Status> {
        let n = prost::bytes::Buf::remaining(buf);
        Ok(Some(prost::bytes::Buf::copy_to_bytes(buf, n).to_vec()))
    }
}

/// A request that is not valid protobuf is the caller's bad input:
/// `INVALID_ARGUMENT` (tonic's own answer is `INTERNAL`), and it fails alone.
async fn undecodable_requests_are_invalid_arguments(backend: Backend) {
    let app = spawn_app(backend).await;
    app.namespace("n", 5, 16).await;
    let channel = tonic::transport::Channel::from_shared(app.grpc.clone())
        .unwrap()
        .connect_lazy();
    let mut grpc = tonic::client::Grpc::new(channel);
    for (what, path, bytes) in [
        // namespace = 1: two bytes that are not UTF-8.
        (
            "invalid UTF-8",
            "/vfps.api.v1.PseudonymService/Create",
            vec![0x0a, 0x02, 0xff, 0xfe],
        ),
        (
            "truncated",
            "/vfps.api.v1.PseudonymService/Create",
            vec![0x0a, 0x05, b'n'],
        ),
        (
            "wrong wire type",
            "/vfps.api.v1.PseudonymService/Get",
            vec![0x0d, 0, 0, 0, 0],
        ),
        (
            "invalid UTF-8",
            "/vfps.api.v1.NamespaceService/Create",
            vec![0x0a, 0x01, 0x80],
        ),
    ] {
        grpc.ready().await.unwrap();
        let e = grpc
            .unary(
                tonic::Request::new(bytes),
                tonic::codegen::http::uri::PathAndQuery::from_static(path),
                RawCodec,
            )
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{what} to {path}: {e:?}");
    }
    assert!(app.create("n", "o").await.is_ok());
}

/// Clients that compress their requests with gzip (upstream accepts them) are
/// served; a compressed message is held to the same size limit once inflated.
async fn gzip_compressed_requests_are_accepted(backend: Backend) {
    use tonic::codec::CompressionEncoding::Gzip;
    let app = spawn_app(backend).await;
    app.namespace("n", 5, 16).await;
    let mut client = app.pseudonyms.clone().send_compressed(Gzip);
    let created = client
        .create(vfps_proto::v1::PseudonymServiceCreateRequest {
            namespace: "n".into(),
            original_value: "o".repeat(2000),
        })
        .await
        .unwrap()
        .into_inner();
    let p = created.pseudonym.unwrap().pseudonym_value;
    let mut namespaces = app.namespaces.clone().send_compressed(Gzip);
    assert!(namespaces
        .get(vfps_proto::v1::NamespaceServiceGetRequest { name: "n".into() })
        .await
        .is_ok());
    let got = client
        .get(vfps_proto::v1::PseudonymServiceGetRequest {
            namespace: "n".into(),
            pseudonym_value: p,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        got.pseudonym.unwrap().original_value,
        Some("o".repeat(2000))
    );
    // 100 KiB of one letter compresses to a few hundred bytes; inflated, it
    // is over the 64 KiB limit.
    let e = client
        .create(vfps_proto::v1::PseudonymServiceCreateRequest {
            namespace: "n".into(),
            original_value: "x".repeat(100 * 1024),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
}

crate::on_both_backends!(
    namespace_rpcs_and_their_status_codes,
    pseudonym_rpcs_and_their_status_codes,
    every_generation_method_has_its_format,
    list_pages_through_everything_without_originals,
    messages_larger_than_the_codecs_first_buffer_arrive_whole,
    undecodable_requests_are_invalid_arguments,
    gzip_compressed_requests_are_accepted,
    deleting_a_namespace_deletes_its_pseudonyms,
    colliding_pseudonyms_are_regenerated_until_the_space_is_full,
    health_and_reflection_are_served,
);
