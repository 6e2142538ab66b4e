//! The double's multipart uploads: parts numbered 1 to 10,000, tagged anew
//! on each upload under SSE-KMS, listed, and completed only with the tags
//! they hold now.

use std::collections::BTreeMap;

use axum::{
    body::Body,
    http::{Method, StatusCode},
    response::Response,
};

use super::{elements, ok_xml, status, tag_of, unescape, xml_error, Behaviour, World};

pub(super) fn upload_op(
    b: &Behaviour,
    world: &mut World,
    method: &Method,
    id: &str,
    key: &str,
    query: &BTreeMap<String, String>,
    body: &[u8],
) -> Response {
    let no_upload = || {
        xml_error(
            StatusCode::NOT_FOUND,
            "NoSuchUpload",
            "The specified upload does not exist.",
            false,
        )
    };
    if world.uploads.get(id).is_none_or(|u| u.key != key) {
        return no_upload();
    }
    world.counter += 1;
    let counter = world.counter;
    let Some(upload) = world.uploads.get_mut(id) else {
        return no_upload();
    };
    match *method {
        Method::PUT => {
            let number = query.get("partNumber").and_then(|n| n.parse::<u32>().ok());
            let Some(number) = number.filter(|n| (1..=10_000).contains(n)) else {
                return xml_error(
                    StatusCode::BAD_REQUEST,
                    "InvalidArgument",
                    "Part number must be an integer between 1 and 10000, inclusive",
                    false,
                );
            };
            let tag = if b.kms {
                format!("\"kms-{counter:030}\"")
            } else {
                tag_of(body)
            };
            upload.parts.insert(number, (tag.clone(), body.to_vec()));
            Response::builder()
                .header("etag", tag)
                .body(Body::empty())
                .expect("a response")
        }
        Method::GET => {
            let mut xml = String::from("<ListPartsResult><IsTruncated>false</IsTruncated>");
            for (number, (tag, bytes)) in &upload.parts {
                xml.push_str(&format!(
                    "<Part><PartNumber>{number}</PartNumber><ETag>{}</ETag><Size>{}</Size></Part>",
                    tag.replace('"', "&quot;"),
                    bytes.len()
                ));
            }
            xml.push_str("</ListPartsResult>");
            ok_xml(xml)
        }
        Method::DELETE => {
            world.uploads.remove(id);
            status(StatusCode::NO_CONTENT)
        }
        Method::POST => {
            let text = String::from_utf8_lossy(body);
            let mut whole = Vec::new();
            let mut last = 0;
            for part in elements(&text, "Part") {
                let number: u32 = elements(part, "PartNumber")
                    .first()
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0);
                let tag = elements(part, "ETag").first().map(|t| unescape(t));
                if number <= last {
                    return xml_error(
                        StatusCode::BAD_REQUEST,
                        "InvalidPartOrder",
                        "The list of parts was not in ascending order.",
                        false,
                    );
                }
                last = number;
                match upload.parts.get(&number) {
                    Some((held, bytes)) if Some(held) == tag.as_ref() => {
                        whole.extend_from_slice(bytes)
                    }
                    _ => {
                        return xml_error(
                            StatusCode::BAD_REQUEST,
                            "InvalidPart",
                            "One or more of the specified parts could not be found. The part may not have been uploaded, or the specified entity tag may not match the part's entity tag.",
                            false,
                        )
                    }
                }
            }
            world.uploads.remove(id);
            world.objects.insert(key.to_owned(), whole);
            ok_xml(format!(
                "<CompleteMultipartUploadResult><Key>{key}</Key></CompleteMultipartUploadResult>"
            ))
        }
        _ => xml_error(
            StatusCode::NOT_IMPLEMENTED,
            "NotImplemented",
            "not in the double",
            false,
        ),
    }
}
