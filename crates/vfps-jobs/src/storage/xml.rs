//! The little XML S3 speaks to us: elements found by name in its answers
//! (error bodies, an upload's id, a listing's keys), and text escaped into the
//! bodies we send. Not a general parser: S3's answers have no CDATA, no
//! comments inside elements and no same-named nesting where we look.

/// The raw content of each `<name>…</name>` in `xml`, in order; `<name/>`
/// counts as empty.
pub fn elements<'a>(xml: &'a str, name: &str) -> Vec<&'a str> {
    let open = format!("<{name}");
    let close = format!("</{name}>");
    let mut found = Vec::new();
    let mut rest = xml;
    while let Some(at) = rest.find(&open) {
        let after_name = &rest[at + open.len()..];
        // `<Key>`, `<Key attr="…">` or `<Key/>`, not `<KeyMarker>`.
        let Some(end_of_tag) = after_name.find('>') else {
            break;
        };
        let tag = &after_name[..end_of_tag];
        if !(tag.is_empty() || tag.starts_with(char::is_whitespace) || tag == "/") {
            rest = after_name;
            continue;
        }
        let content = &after_name[end_of_tag + 1..];
        if tag.ends_with('/') {
            found.push("");
            rest = content;
            continue;
        }
        let Some(len) = content.find(&close) else {
            break;
        };
        found.push(&content[..len]);
        rest = &content[len + close.len()..];
    }
    found
}

/// The text of the first `<name>` in `xml`, unescaped.
pub fn text(xml: &str, name: &str) -> Option<String> {
    elements(xml, name).first().map(|t| unescape(t))
}

/// Text with XML's entities and character references replaced; an unknown
/// entity is kept as it is.
pub fn unescape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        let Some(end) = rest.find(';') else {
            break;
        };
        let entity = &rest[1..end];
        let replaced = match entity {
            "lt" => Some('<'),
            "gt" => Some('>'),
            "amp" => Some('&'),
            "quot" => Some('"'),
            "apos" => Some('\''),
            _ => entity
                .strip_prefix("#x")
                .map(|hex| u32::from_str_radix(hex, 16))
                .or_else(|| entity.strip_prefix('#').map(str::parse::<u32>))
                .and_then(Result::ok)
                .and_then(char::from_u32),
        };
        match replaced {
            Some(c) => {
                out.push(c);
                rest = &rest[end + 1..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// Text safe inside an element.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
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
    fn empty_elements_and_stray_ampersands_are_taken_as_they_are() {
        assert_eq!(elements("<a><Key/><Key>k</Key></a>", "Key"), ["", "k"]);
        assert_eq!(unescape("a & b &unknown; c"), "a & b &unknown; c");
        assert_eq!(
            escape(r#"<"a" & 'b'>"#),
            "&lt;&quot;a&quot; &amp; &apos;b&apos;&gt;"
        );
        assert_eq!(unescape(&escape(r#"<"a" & 'b'>"#)), r#"<"a" & 'b'>"#);
    }
}
