//! When the served certificate stops being valid, and a warning before then:
//! an expired certificate is served as readily as a valid one, and clients
//! refuse it. Only the certificate's `notAfter` is read, by a small DER walk
//! (no X.509 parser in the build).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Warned this long before the certificate expires.
pub const SOON: Duration = Duration::from_secs(14 * 24 * 3600);

/// Where a certificate stands, for the log (said again only when it changes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    Valid,
    ExpiresSoon,
    Expired,
    /// Its `notAfter` could not be read.
    Unknown,
}

impl Standing {
    pub fn of(not_after: Option<SystemTime>, now: SystemTime) -> Self {
        match not_after {
            None => Self::Unknown,
            Some(t) if t <= now => Self::Expired,
            Some(t) if t.duration_since(now).unwrap_or_default() <= SOON => Self::ExpiresSoon,
            Some(_) => Self::Valid,
        }
    }
}

/// For the log: how far `not_after` is from `now`, in days.
pub fn describe(not_after: SystemTime, now: SystemTime) -> String {
    let days = |d: Duration| d.as_secs() / 86_400;
    match not_after.duration_since(now) {
        Ok(left) => format!(
            "expires in {} days ({} s since 1970)",
            days(left),
            unix(not_after)
        ),
        Err(e) => format!(
            "expired {} days ago ({} s since 1970)",
            days(e.duration()),
            unix(not_after)
        ),
    }
}

fn unix(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// The `notAfter` of a DER X.509 certificate: Certificate → tbsCertificate →
/// [version], serialNumber, signature, issuer, validity → notAfter.
pub fn not_after(der: &[u8]) -> Option<SystemTime> {
    let (tag, certificate, _) = tlv(der)?;
    if tag != 0x30 {
        return None;
    }
    let (tag, mut tbs, _) = tlv(certificate)?;
    if tag != 0x30 {
        return None;
    }
    if tbs.first() == Some(&0xa0) {
        tbs = tlv(tbs)?.2;
    }
    for _ in 0..3 {
        // serialNumber, signature, issuer
        tbs = tlv(tbs)?.2;
    }
    let (tag, validity, _) = tlv(tbs)?;
    if tag != 0x30 {
        return None;
    }
    let after = tlv(validity)?.2;
    let (tag, time, _) = tlv(after)?;
    let digits = std::str::from_utf8(time.strip_suffix(b"Z")?).ok()?;
    // Digits only: no sign, no multi-byte character to slice inside.
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (year, rest) = match (tag, digits.len()) {
        (0x17, 12) => {
            let yy: i64 = digits[..2].parse().ok()?;
            (if yy >= 50 { 1900 + yy } else { 2000 + yy }, &digits[2..])
        }
        (0x18, 14) => (digits[..4].parse().ok()?, &digits[4..]),
        _ => return None,
    };
    let field = |i: usize| -> Option<i64> { rest.get(i..i + 2)?.parse().ok() };
    let (month, day, hour, minute, second) =
        (field(0)?, field(2)?, field(4)?, field(6)?, field(8)?);
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let seconds = days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second;
    let seconds = u64::try_from(seconds).ok()?;
    UNIX_EPOCH.checked_add(Duration::from_secs(seconds))
}

/// One DER element: (tag, contents, the rest after it). Single-byte tags.
fn tlv(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (length, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let length = rest[..n]
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
        (length, &rest[n..])
    };
    if rest.len() < length {
        return None;
    }
    Some((tag, &rest[..length], &rest[length..]))
}

/// Days from 1970-01-01 to a proleptic Gregorian date.
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_count_days_as_the_calendar_does() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(days_from_civil(2026, 12, 2), 20_789);
    }

    /// A certificate made by openssl, valid for `days` from now.
    fn certificate(days: &str) -> Vec<u8> {
        let dir = vfps_testkit::scratch_dir("expiry");
        let (key, cert) = (dir.join("k.pem"), dir.join("c.der"));
        let out = std::process::Command::new("openssl")
            .args([
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
            ])
            .args([
                "-nodes", "-subj", "/CN=vfps", "-days", days, "-outform", "DER",
            ])
            .arg("-keyout")
            .arg(&key)
            .arg("-out")
            .arg(&cert)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::read(cert).unwrap()
    }

    #[test]
    fn a_certificates_not_after_is_read() {
        let now = SystemTime::now();
        let t = not_after(&certificate("30")).unwrap();
        let left = t.duration_since(now).unwrap().as_secs();
        assert!((29 * 86_400..=30 * 86_400 + 60).contains(&left), "{left}");
        assert_eq!(Standing::of(Some(t), now), Standing::Valid);
        let t = not_after(&certificate("3")).unwrap();
        assert_eq!(Standing::of(Some(t), now), Standing::ExpiresSoon);
        assert!(
            describe(t, now).starts_with("expires in 2 days")
                || describe(t, now).starts_with("expires in 3 days")
        );
        // Counted from the certificate's own time: openssl stamps it in whole
        // seconds of its own clock, up to a second after `now`.
        let later = t + Duration::from_secs(7 * 86_400 + 60);
        assert_eq!(Standing::of(Some(t), later), Standing::Expired);
        assert!(
            describe(t, later).starts_with("expired 7 days ago"),
            "{}",
            describe(t, later)
        );
        // Years past 2049 are GeneralizedTime.
        let t = not_after(&certificate("20000")).unwrap();
        assert!(t.duration_since(now).unwrap().as_secs() > 50 * 365 * 86_400);
        assert_eq!(not_after(b"\x30\x03\x02\x01\x00"), None);
        // A time field that is not all digits (a sign, a multi-byte character).
        for bad in ["1\u{e9}901010000Z", "2601-1000000Z"] {
            let mut der = vec![0x30, 0, 0x30, 0, 0x02, 1, 1, 0x30, 0, 0x30, 0, 0x30, 0];
            let time: Vec<u8> = [vec![0x17, bad.len() as u8], bad.as_bytes().to_vec()].concat();
            der.extend([vec![0x17, 13], b"260101000000Z".to_vec()].concat());
            der.extend(&time);
            // validity SEQUENCE length, then tbs and certificate lengths.
            let validity_len = 15 + time.len();
            der[12] = validity_len as u8;
            der[3] = (der.len() - 4) as u8;
            der[1] = (der.len() - 2) as u8;
            assert_eq!(not_after(&der), None, "{bad}");
        }
        assert_eq!(Standing::of(None, now), Standing::Unknown);
    }
}
