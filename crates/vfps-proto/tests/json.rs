//! The proto3 JSON of the contract, as upstream's JSON transcoding writes it
//! (ASP.NET Core, default `GrpcJsonSettings`) and as leniently as it reads it.

#![allow(clippy::unwrap_used)]

use vfps_proto::v1::{
    Namespace, NamespaceServiceDeleteResponse, NamespaceServiceGetAllResponse, Pseudonym,
    PseudonymServiceListResponse,
};

fn text<T: serde::Serialize>(message: &T) -> String {
    serde_json::to_string(message).unwrap()
}

#[test]
fn fields_at_their_default_are_written_and_unset_optionals_are_not() {
    assert_eq!(
        text(&Namespace::default()),
        r#"{"name":"","description":"","pseudonymGenerationMethod":"PSEUDONYM_GENERATION_METHOD_UNSPECIFIED","pseudonymLength":0}"#
    );
    assert_eq!(
        text(&Pseudonym::default()),
        r#"{"namespace":"","pseudonymValue":""}"#
    );
    assert_eq!(
        text(&NamespaceServiceGetAllResponse::default()),
        r#"{"namespaces":[]}"#
    );
    assert_eq!(text(&NamespaceServiceDeleteResponse::default()), "{}");
    assert_eq!(
        text(&PseudonymServiceListResponse::default()),
        r#"{"namespace":"","nextPageToken":"","pseudonyms":[]}"#
    );
}

#[test]
fn int64_is_written_as_a_number_and_read_as_a_number_or_a_string() {
    let page = PseudonymServiceListResponse {
        namespace: "n".into(),
        total_size: Some(9_007_199_254_740_993),
        next_page_token: "t".into(),
        pseudonyms: vec![Pseudonym {
            namespace: "n".into(),
            pseudonym_value: "p".into(),
            ..Default::default()
        }],
    };
    let json = text(&page);
    assert_eq!(
        json,
        r#"{"namespace":"n","totalSize":9007199254740993,"nextPageToken":"t","pseudonyms":[{"namespace":"n","pseudonymValue":"p"}]}"#
    );
    assert_eq!(
        serde_json::from_str::<PseudonymServiceListResponse>(&json).unwrap(),
        page
    );
    let read = |json: &str| serde_json::from_str::<PseudonymServiceListResponse>(json);
    for total in ["9", r#""9""#] {
        let got = read(&format!(r#"{{"namespace":"n","totalSize":{total}}}"#)).unwrap();
        assert_eq!(got.total_size, Some(9), "{total}");
    }
    let got = read(
        r#"{"namespace":"n","total_size":"-1","next_page_token":null,"pseudonyms":null,"x":[1]}"#,
    )
    .unwrap();
    assert_eq!(
        (
            got.total_size,
            got.next_page_token.as_str(),
            got.pseudonyms.len()
        ),
        (Some(-1), "", 0)
    );
    assert_eq!(read(r#"{"totalSize":null}"#).unwrap().total_size, None);
    for bad in [
        r#"{"totalSize":"nine"}"#,
        r#"{"totalSize":1.5}"#,
        r#"{"totalSize":true}"#,
        r#"{"totalSize":1,"total_size":1}"#,
        r#"{"pseudonyms":{}}"#,
    ] {
        assert!(read(bad).is_err(), "{bad}");
    }
}
