//! RFC 4180 records found in raw bytes, so that what a job does not change is
//! copied exactly as it came: each field's quoting, the line endings (CRLF, LF
//! or a lone CR), a byte order mark.
//!
//! The scanner works on code units of the job's [`Encoding`] (bytes, or UTF-16
//! units), where the delimiter, the quote and the line breaks are ASCII. It
//! never decodes a field; [`Record::text`] does, for the fields a job maps.
//!
//! A record whose quoting is broken (a quote inside an unquoted field, text
//! after a closing quote, a quote never closed) is still one record: it ends
//! where its physical line ends and is marked [`Record::broken_quoting`], so the
//! job passes it through unchanged and counts it.

use bytes::{Bytes, BytesMut};

use crate::encoding::{Encoding, EncodingError};

const QUOTE: u16 = b'"' as u16;
const CR: u16 = b'\r' as u16;
const LF: u16 = b'\n' as u16;

/// Where one field lies in its record's bytes; a quoted field's span includes
/// its quotes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    pub start: usize,
    pub end: usize,
    pub quoted: bool,
}

/// One record: its bytes (line ending included) and its fields.
#[derive(Debug, Clone)]
pub struct Record {
    pub bytes: Bytes,
    pub fields: Vec<Field>,
    /// Where the line ending starts (`bytes.len()` when the file ends without one).
    pub body_end: usize,
    /// The physical line the record starts on, 1-based.
    pub line: u64,
    /// Line breaks in the record, its own ending included.
    pub line_breaks: u64,
    pub broken_quoting: bool,
}

impl Record {
    /// A field's text: decoded, a quoted field's quotes removed and its doubled
    /// quotes undone.
    pub fn text(&self, field: usize, encoding: Encoding) -> Result<String, EncodingError> {
        let f = self.fields[field];
        let w = encoding.unit_bytes();
        let raw = &self.bytes[f.start..f.end];
        if !f.quoted {
            return encoding.decode(raw);
        }
        let inner = &raw[w..raw.len() - w];
        let text = encoding.decode(inner)?;
        Ok(if text.contains('"') {
            text.replace("\"\"", "\"")
        } else {
            text
        })
    }

    /// The raw bytes of a field, quotes and all.
    pub fn raw(&self, field: usize) -> &[u8] {
        let f = self.fields[field];
        &self.bytes[f.start..f.end]
    }

    /// Whether the record is one empty line.
    pub fn is_blank_line(&self) -> bool {
        self.body_end == 0 && !self.bytes.is_empty()
    }
}

/// Why scanning stopped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScanError {
    #[error("line {line}: a record is longer than {limit} bytes")]
    TooLong { line: u64, limit: usize },
    #[error("line {line}: the file ends inside a code unit of {encoding}")]
    Truncated { line: u64, encoding: Encoding },
}

/// Finds records one after another in a growing buffer.
#[derive(Debug, Clone)]
pub struct Scanner {
    encoding: Encoding,
    delimiter: u16,
    max_record_bytes: usize,
    /// The physical line the next record starts on.
    line: u64,
}

/// What [`Scanner::next`] found at the front of the buffer.
#[derive(Debug)]
pub enum Scanned {
    Record(Record),
    /// The buffer ends inside a record: read more (or, at the end of the file,
    /// it was the last one — see `eof`).
    NeedMore,
    /// Nothing left: the buffer is empty and the file has ended.
    End,
}

impl Scanner {
    /// `delimiter` must be ASCII and not a quote or line break (checked where a
    /// job's spec is parsed). `line` is the line the first record starts on.
    pub fn new(encoding: Encoding, delimiter: u8, max_record_bytes: usize, line: u64) -> Self {
        Self {
            encoding,
            delimiter: u16::from(delimiter),
            max_record_bytes,
            line,
        }
    }

    /// The physical line the next record starts on.
    pub fn line(&self) -> u64 {
        self.line
    }

    /// Splits the next record off the front of `buf`. `eof`: nothing follows
    /// what `buf` holds.
    pub fn next(&mut self, buf: &mut BytesMut, eof: bool) -> Result<Scanned, ScanError> {
        let w = self.encoding.unit_bytes();
        // Only whole code units are looked at; a trailing partial one waits.
        let len = buf.len() - buf.len() % w;
        if eof && len != buf.len() {
            return Err(ScanError::Truncated {
                line: self.line,
                encoding: self.encoding,
            });
        }
        if len == 0 {
            return Ok(if eof { Scanned::End } else { Scanned::NeedMore });
        }
        match self.find(&buf[..len], eof) {
            Some(found) if found.end > self.max_record_bytes => Err(ScanError::TooLong {
                line: self.line,
                limit: self.max_record_bytes,
            }),
            Some(found) => {
                let bytes = buf.split_to(found.end).freeze();
                let record = Record {
                    bytes,
                    fields: found.fields,
                    body_end: found.body_end,
                    line: self.line,
                    line_breaks: found.line_breaks,
                    broken_quoting: found.broken,
                };
                self.line += found.line_breaks;
                Ok(Scanned::Record(record))
            }
            None if len >= self.max_record_bytes => Err(ScanError::TooLong {
                line: self.line,
                limit: self.max_record_bytes,
            }),
            None => Ok(Scanned::NeedMore),
        }
    }

    /// The extent of the first record of `b`, or `None` if `b` ends inside it
    /// and more may come.
    fn find(&self, b: &[u8], eof: bool) -> Option<Found> {
        let e = self.encoding;
        let w = e.unit_bytes();
        let at = |i: usize| e.unit(b, i);
        let mut fields = Vec::new();
        let mut line_breaks = 0u64;
        let mut broken = false;
        let mut i = 0;
        loop {
            let start = i;
            if i < b.len() && at(i) == QUOTE {
                // A quoted field: up to the quote not followed by another.
                let mut j = i + w;
                let closed = loop {
                    if j >= b.len() {
                        break false;
                    }
                    match at(j) {
                        QUOTE => {
                            if j + w >= b.len() && !eof {
                                return None;
                            }
                            if j + w < b.len() && at(j + w) == QUOTE {
                                j += 2 * w;
                                continue;
                            }
                            j += w;
                            break true;
                        }
                        LF => line_breaks += 1,
                        CR => {
                            if j + w >= b.len() && !eof {
                                return None;
                            }
                            if !(j + w < b.len() && at(j + w) == LF) {
                                line_breaks += 1;
                            }
                        }
                        _ => {}
                    }
                    j += w;
                };
                if !closed {
                    if !eof {
                        return None;
                    }
                    // Never closed: the rest of the file is this one record.
                    fields.push(Field {
                        start,
                        end: b.len(),
                        quoted: false,
                    });
                    return Some(Found {
                        end: b.len(),
                        body_end: b.len(),
                        fields,
                        line_breaks: line_breaks + 1,
                        broken: true,
                    });
                }
                fields.push(Field {
                    start,
                    end: j,
                    quoted: true,
                });
                i = j;
                if i < b.len() && ![self.delimiter, CR, LF].contains(&at(i)) {
                    // Text after the closing quote: the rest of the line
                    // belongs to this record, which passes through unchanged.
                    broken = true;
                    while i < b.len() && !matches!(at(i), CR | LF) {
                        i += w;
                    }
                    if let Some(last) = fields.last_mut() {
                        last.end = i;
                        last.quoted = false;
                    }
                }
            } else {
                while i < b.len() {
                    let u = at(i);
                    if u == self.delimiter || u == CR || u == LF {
                        break;
                    }
                    if u == QUOTE {
                        broken = true;
                    }
                    i += w;
                }
                fields.push(Field {
                    start,
                    end: i,
                    quoted: false,
                });
            }
            // `i` is at a delimiter, a line break or the end of the buffer.
            if i >= b.len() {
                if !eof {
                    return None;
                }
                return Some(Found {
                    end: b.len(),
                    body_end: b.len(),
                    fields,
                    line_breaks: line_breaks + 1,
                    broken,
                });
            }
            match at(i) {
                LF => {
                    return Some(Found {
                        end: i + w,
                        body_end: i,
                        fields,
                        line_breaks: line_breaks + 1,
                        broken,
                    })
                }
                CR => {
                    if i + w >= b.len() && !eof {
                        return None;
                    }
                    let end = if i + w < b.len() && at(i + w) == LF {
                        i + 2 * w
                    } else {
                        i + w
                    };
                    return Some(Found {
                        end,
                        body_end: i,
                        fields,
                        line_breaks: line_breaks + 1,
                        broken,
                    });
                }
                // The delimiter: another field follows.
                _ => i += w,
            }
        }
    }
}

struct Found {
    end: usize,
    body_end: usize,
    fields: Vec<Field>,
    line_breaks: u64,
    broken: bool,
}

/// Whether a value must be quoted to be written as one field.
pub fn needs_quoting(text: &str, delimiter: u8) -> bool {
    text.chars()
        .any(|c| c == '"' || c == '\r' || c == '\n' || c == char::from(delimiter))
}

/// Appends `text` as one field: quoted (its quotes doubled) when `quote` or
/// when it has to be.
pub fn write_field(
    text: &str,
    quote: bool,
    delimiter: u8,
    encoding: Encoding,
    out: &mut Vec<u8>,
) -> Result<(), EncodingError> {
    if quote || needs_quoting(text, delimiter) {
        encoding.push_ascii(b'"', out);
        if text.contains('"') {
            encoding.encode_into(&text.replace('"', "\"\""), out)?;
        } else {
            encoding.encode_into(text, out)?;
        }
        encoding.push_ascii(b'"', out);
        Ok(())
    } else {
        encoding.encode_into(text, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every record of `input`, fed `chunk` bytes at a time.
    fn scan(input: &[u8], encoding: Encoding, chunk: usize) -> Vec<Record> {
        let mut scanner = Scanner::new(encoding, b',', 1 << 20, 1);
        let mut buf = BytesMut::new();
        let mut fed = 0;
        let mut out = Vec::new();
        loop {
            let eof = fed == input.len();
            match scanner.next(&mut buf, eof).unwrap() {
                Scanned::Record(r) => out.push(r),
                Scanned::End => return out,
                Scanned::NeedMore => {
                    let n = chunk.min(input.len() - fed);
                    buf.extend_from_slice(&input[fed..fed + n]);
                    fed += n;
                }
            }
        }
    }

    fn texts(r: &Record, e: Encoding) -> Vec<String> {
        (0..r.fields.len()).map(|f| r.text(f, e).unwrap()).collect()
    }

    #[test]
    fn records_are_found_whatever_the_chunking() {
        let input = b"id,name\r\n1,\"Smith, J.\"\n2,\"say \"\"hi\"\"\"\r3,\"two\nlines\"\n4,last";
        for chunk in [1, 2, 3, 7, 1000] {
            let records = scan(input, Encoding::Utf8, chunk);
            assert_eq!(records.len(), 5, "chunk {chunk}");
            assert_eq!(texts(&records[1], Encoding::Utf8), ["1", "Smith, J."]);
            assert_eq!(texts(&records[2], Encoding::Utf8), ["2", "say \"hi\""]);
            assert_eq!(texts(&records[3], Encoding::Utf8), ["3", "two\nlines"]);
            assert_eq!(texts(&records[4], Encoding::Utf8), ["4", "last"]);
            assert_eq!(
                records.iter().map(|r| r.line).collect::<Vec<_>>(),
                [1, 2, 3, 4, 6]
            );
            assert!(records.iter().all(|r| !r.broken_quoting));
            // Nothing lost, nothing added: the records are the input.
            let joined: Vec<u8> = records.iter().flat_map(|r| r.bytes.to_vec()).collect();
            assert_eq!(joined, input);
            assert_eq!(&records[0].bytes[records[0].body_end..], b"\r\n");
            assert_eq!(&records[2].bytes[records[2].body_end..], b"\r");
            assert_eq!(records[4].body_end, records[4].bytes.len());
        }
    }

    #[test]
    fn broken_quoting_ends_with_its_line_and_is_marked() {
        let input = b"a,b\n1,x\"y\n\"q\"z,2\n3,4\n\"open,5\n6";
        let records = scan(input, Encoding::Utf8, 3);
        let broken: Vec<bool> = records.iter().map(|r| r.broken_quoting).collect();
        assert_eq!(broken, [false, true, true, false, true]);
        assert_eq!(&records[2].bytes[..], b"\"q\"z,2\n");
        // A quote never closed takes the rest of the file.
        assert_eq!(&records[4].bytes[..], b"\"open,5\n6");
        let joined: Vec<u8> = records.iter().flat_map(|r| r.bytes.to_vec()).collect();
        assert_eq!(joined, input);
    }

    #[test]
    fn empty_fields_and_blank_lines_are_records() {
        let records = scan(b",\n\n\"\"\n", Encoding::Utf8, 1);
        assert_eq!(records.len(), 3);
        assert_eq!(texts(&records[0], Encoding::Utf8), ["", ""]);
        assert!(records[1].is_blank_line());
        assert_eq!(texts(&records[2], Encoding::Utf8), [""]);
        assert!(!records[2].is_blank_line());
    }

    #[test]
    fn utf16_is_scanned_in_code_units() {
        let text = "name,city\r\n\"Zoë, Jr.\",Köln\r\n";
        for e in [Encoding::Utf16Le, Encoding::Utf16Be] {
            let mut input = Vec::new();
            e.encode_into(text, &mut input).unwrap();
            for chunk in [1, 3, 64] {
                let records = scan(&input, e, chunk);
                assert_eq!(records.len(), 2);
                assert_eq!(texts(&records[1], e), ["Zoë, Jr.", "Köln"]);
            }
        }
        // A byte whose unit is 0x0A00 in little-endian is not a line feed.
        let records = scan(&[b'a', 0, 0, b'\n', b'\n', 0], Encoding::Utf16Le, 1);
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].body_end, 4);
    }

    #[test]
    fn a_record_over_the_limit_is_an_error_naming_its_line() {
        let mut scanner = Scanner::new(Encoding::Utf8, b',', 8, 1);
        let mut buf = BytesMut::from(&b"ok\n0123456789abcdef"[..]);
        assert!(matches!(
            scanner.next(&mut buf, false),
            Ok(Scanned::Record(_))
        ));
        assert_eq!(
            scanner.next(&mut buf, false).unwrap_err(),
            ScanError::TooLong { line: 2, limit: 8 }
        );
    }

    #[test]
    fn a_file_ending_inside_a_utf16_unit_is_truncated() {
        let mut scanner = Scanner::new(Encoding::Utf16Le, b',', 100, 1);
        let mut buf = BytesMut::from(&b"a\0b"[..]);
        assert!(matches!(
            scanner.next(&mut buf, true),
            Err(ScanError::Truncated { line: 1, .. })
        ));
    }

    #[test]
    fn fields_are_quoted_when_asked_or_needed() {
        let mut out = Vec::new();
        write_field("plain", false, b';', Encoding::Utf8, &mut out).unwrap();
        out.push(b'|');
        write_field("a;b", false, b';', Encoding::Utf8, &mut out).unwrap();
        out.push(b'|');
        write_field("say \"x\"", false, b';', Encoding::Utf8, &mut out).unwrap();
        out.push(b'|');
        write_field("q", true, b';', Encoding::Utf8, &mut out).unwrap();
        assert_eq!(out, b"plain|\"a;b\"|\"say \"\"x\"\"\"|\"q\"");
    }
}
