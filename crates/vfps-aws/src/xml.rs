//! The little XML S3 and STS speak to us: elements found by name in their
//! answers (error bodies, an upload's id, a listing's keys, temporary
//! credentials), and text escaped into the bodies we send.
//!
//! Read by `quick-xml` (one small crate, measured in docs/object-storage.md):
//! S3-compatible stores differ in what they may put in an answer — CDATA,
//! comments, namespace prefixes, character references — and a parser takes
//! them all; what an element is called is matched without its prefix.

use quick_xml::{
    escape::resolve_predefined_entity,
    events::{BytesStart, Event},
    Reader,
};

/// Whether `tag` is element `name`, whatever its namespace prefix.
fn named(tag: &BytesStart<'_>, name: &str) -> bool {
    tag.local_name().as_ref() == name.as_bytes()
}

/// The raw content of each `<name>…</name>` in `xml` that is not inside
/// another one, in order; `<name/>` counts as empty. Malformed XML ends the
/// search where it breaks.
pub fn elements<'a>(xml: &'a str, name: &str) -> Vec<&'a str> {
    let mut reader = Reader::from_str(xml);
    let mut found = Vec::new();
    loop {
        match reader.read_event() {
            Ok(Event::Start(tag)) if named(&tag, name) => {
                let end = tag.to_end().into_owned();
                match reader.read_to_end(end.name()) {
                    Ok(span) => {
                        let range = usize::try_from(span.start).unwrap_or(usize::MAX)
                            ..usize::try_from(span.end).unwrap_or(usize::MAX);
                        match xml.get(range) {
                            Some(inner) => found.push(inner),
                            None => break,
                        }
                    }
                    Err(_) => break,
                }
            }
            Ok(Event::Empty(tag)) if named(&tag, name) => found.push(""),
            Ok(Event::Eof) | Err(_) => break,
            Ok(_) => {}
        }
    }
    found
}

/// The text of the first `<name>` in `xml`, references resolved and CDATA
/// taken as it is; `None` when there is none or its text is malformed.
pub fn text(xml: &str, name: &str) -> Option<String> {
    let inner = *elements(xml, name).first()?;
    let mut reader = Reader::from_str(inner);
    let mut out = String::new();
    loop {
        match reader.read_event().ok()? {
            Event::Text(t) => out.push_str(&t.decode().ok()?),
            Event::CData(c) => out.push_str(&c.decode().ok()?),
            Event::GeneralRef(r) => match r.resolve_char_ref().ok()? {
                Some(c) => out.push(c),
                None => out.push_str(resolve_predefined_entity(&r.decode().ok()?)?),
            },
            Event::Eof => return Some(out),
            _ => {}
        }
    }
}

/// Text safe inside an element.
pub fn escape(text: &str) -> String {
    quick_xml::escape::escape(text).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_body_gives_its_code_and_message() {
        let body = r#"<?xml version="1.0" encoding="UTF-8"?>
<Error><Code>NoSuchKey</Code><Message>The resource you requested does not exist &amp; never did</Message>
<Resource>/mybucket/myfoto.jpg</Resource><RequestId>4442587FB7D0A2F9</RequestId></Error>"#;
        assert_eq!(text(body, "Code").as_deref(), Some("NoSuchKey"));
        assert_eq!(
            text(body, "Message").as_deref(),
            Some("The resource you requested does not exist & never did")
        );
        assert_eq!(text(body, "UploadId"), None);
    }

    #[test]
    fn a_listing_gives_its_keys_and_continuation_not_similar_names() {
        let body = r#"<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
<Name>b</Name><Prefix>csv-jobs/</Prefix><KeyCount>2</KeyCount><MaxKeys>2</MaxKeys>
<IsTruncated>true</IsTruncated>
<Contents><Key>csv-jobs/a/x&amp;y</Key><Size>3</Size></Contents>
<Contents><Key>csv-jobs/a/&#x4E2D;&#20013;</Key><Size>0</Size></Contents>
<NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</NextContinuationToken>
</ListBucketResult>"#;
        let keys: Vec<String> = elements(body, "Contents")
            .iter()
            .filter_map(|c| text(c, "Key"))
            .collect();
        assert_eq!(keys, ["csv-jobs/a/x&y", "csv-jobs/a/中中"]);
        assert_eq!(text(body, "KeyCount").as_deref(), Some("2"));
        assert_eq!(text(body, "IsTruncated").as_deref(), Some("true"));
        assert_eq!(
            text(body, "NextContinuationToken").as_deref(),
            Some("1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=")
        );
    }

    #[test]
    fn empty_elements_and_escaped_text_round_trip() {
        assert_eq!(elements("<a><Key/><Key>k</Key></a>", "Key"), ["", "k"]);
        assert_eq!(
            escape(r#"<"a" & 'b'>"#),
            "&lt;&quot;a&quot; &amp; &apos;b&apos;&gt;"
        );
        let sent = format!("<Key>{}</Key>", escape(r#"<"a" & 'b'>"#));
        assert_eq!(text(&sent, "Key").as_deref(), Some(r#"<"a" & 'b'>"#));
    }

    #[test]
    fn what_other_stores_may_write_is_read_too() {
        // A namespace prefix, a comment, CDATA, and a nested element of the
        // same name as the one looked for.
        let body = r#"<?xml version="1.0"?><s3:ListPartsResult xmlns:s3="http://s3.amazonaws.com/doc/2006-03-01/">
<!-- a comment --><s3:Part><s3:PartNumber>1</s3:PartNumber><s3:ETag><![CDATA["a&b"]]></s3:ETag></s3:Part>
<s3:Part><s3:PartNumber>2</s3:PartNumber><s3:ETag>&quot;c&quot;</s3:ETag></s3:Part></s3:ListPartsResult>"#;
        let parts: Vec<(String, String)> = elements(body, "Part")
            .iter()
            .filter_map(|p| Some((text(p, "PartNumber")?, text(p, "ETag")?)))
            .collect();
        assert_eq!(
            parts,
            [
                ("1".to_owned(), "\"a&b\"".to_owned()),
                ("2".to_owned(), "\"c\"".to_owned())
            ]
        );
        assert_eq!(elements("<a><b><a>x</a></b></a>", "a"), ["<b><a>x</a></b>"]);
        // Malformed: nothing past the break, no panic.
        assert_eq!(text("<Code>NoSuch", "Code"), None);
        assert_eq!(text("<Code>a &bogus; b</Code>", "Code"), None);
    }
}
