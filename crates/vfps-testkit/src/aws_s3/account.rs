//! The double's account: whose credentials a request carries and whether
//! they are accepted (a session token, signed, unexpired, for its key), and
//! STS handing out credentials that expire.

use std::{
    collections::BTreeMap,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use axum::{
    body::Body,
    http::{HeaderMap, StatusCode},
    response::Response,
};

use super::{ok_xml, query_pairs, xml_error, Session, Shared};

/// Whether the request's credentials are accepted (header or presigned).
pub(super) fn authorized(
    shared: &Shared,
    headers: &HeaderMap,
    query: &BTreeMap<String, String>,
    head: bool,
) -> Result<(), Box<Response>> {
    let header = |n: &str| headers.get(n).and_then(|v| v.to_str().ok());
    let (access_key, token, token_signed) = match header("authorization") {
        Some(auth) => {
            let Some(rest) = auth.strip_prefix("AWS4-HMAC-SHA256 Credential=") else {
                return Err(Box::new(xml_error(
                    StatusCode::BAD_REQUEST,
                    "AuthorizationHeaderMalformed",
                    "not SigV4",
                    head,
                )));
            };
            let access_key = rest.split('/').next().unwrap_or_default().to_owned();
            let signed = auth
                .split("SignedHeaders=")
                .nth(1)
                .and_then(|s| s.split(',').next())
                .unwrap_or_default();
            let token_signed = signed.split(';').any(|h| h == "x-amz-security-token");
            (
                access_key,
                header("x-amz-security-token").map(str::to_owned),
                token_signed,
            )
        }
        None => match query.get("X-Amz-Credential") {
            Some(credential) => (
                credential.split('/').next().unwrap_or_default().to_owned(),
                query.get("X-Amz-Security-Token").cloned(),
                true,
            ),
            None => {
                return Err(Box::new(xml_error(
                    StatusCode::FORBIDDEN,
                    "AccessDenied",
                    "Anonymous access is denied",
                    head,
                )))
            }
        },
    };
    if matches!(shared.behaviour.session, Session::Any) {
        return Ok(());
    }
    let world = shared.world.lock().expect("double");
    let Some(token) = token else {
        return Err(Box::new(xml_error(
            StatusCode::FORBIDDEN,
            "InvalidAccessKeyId",
            "The AWS Access Key Id you provided does not exist in our records.",
            head,
        )));
    };
    match world.tokens.get(&token) {
        Some((key, _)) if *key != access_key || !token_signed => Err(Box::new(xml_error(
            StatusCode::FORBIDDEN,
            "InvalidToken",
            "The provided token is malformed or otherwise invalid.",
            head,
        ))),
        Some((_, expires)) if *expires <= SystemTime::now() => Err(Box::new(xml_error(
            StatusCode::BAD_REQUEST,
            "ExpiredToken",
            "The provided token has expired.",
            head,
        ))),
        Some(_) => Ok(()),
        None => Err(Box::new(xml_error(
            StatusCode::FORBIDDEN,
            "InvalidToken",
            "The provided token is malformed or otherwise invalid.",
            head,
        ))),
    }
}

/// STS `AssumeRoleWithWebIdentity`.
pub(super) fn sts(shared: &Shared, body: &[u8]) -> Response {
    let form = query_pairs(&String::from_utf8_lossy(body));
    let Session::Sts {
        role_arn,
        web_token,
        lifetime,
    } = &shared.behaviour.session
    else {
        return sts_error(StatusCode::BAD_REQUEST, "InvalidAction", "no STS here");
    };
    if form.get("Action").map(String::as_str) != Some("AssumeRoleWithWebIdentity")
        || form.get("Version").map(String::as_str) != Some("2011-06-15")
        || form.get("RoleSessionName").is_none_or(String::is_empty)
    {
        return sts_error(StatusCode::BAD_REQUEST, "ValidationError", "bad request");
    }
    if form.get("RoleArn") != Some(role_arn) {
        return sts_error(
            StatusCode::FORBIDDEN,
            "AccessDenied",
            "Not authorized to perform sts:AssumeRoleWithWebIdentity",
        );
    }
    if form.get("WebIdentityToken") != Some(web_token) {
        return sts_error(
            StatusCode::BAD_REQUEST,
            "InvalidIdentityToken",
            "Couldn't retrieve verification key from your identity provider",
        );
    }
    let mut world = shared.world.lock().expect("double");
    world.sts_calls += 1;
    world.counter += 1;
    let n = world.counter;
    // Whole seconds, as STS writes them, rounded down.
    let now = UNIX_EPOCH
        + Duration::from_secs(
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .as_secs(),
        );
    let expires = now + *lifetime;
    let (access_key, token) = (format!("ASIADOUBLE{n}"), format!("session-token-{n}"));
    world
        .tokens
        .insert(token.clone(), (access_key.clone(), expires));
    ok_xml(format!(
        "<AssumeRoleWithWebIdentityResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\"><AssumeRoleWithWebIdentityResult>\
         <Credentials><SessionToken>{token}</SessionToken><SecretAccessKey>secret-{n}</SecretAccessKey>\
         <Expiration>{}</Expiration><AccessKeyId>{access_key}</AccessKeyId></Credentials>\
         </AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>",
        iso8601(expires)
    ))
}

fn sts_error(status: StatusCode, code: &str, message: &str) -> Response {
    Response::builder()
        .status(status)
        .header("content-type", "text/xml")
        .body(Body::from(format!(
            "<ErrorResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\"><Error><Type>Sender</Type><Code>{code}</Code><Message>{message}</Message></Error><RequestId>double</RequestId></ErrorResponse>"
        )))
        .expect("a response")
}

fn iso8601(at: SystemTime) -> String {
    let secs = at.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
    let (days, sod) = (secs / 86_400, secs % 86_400);
    // Howard Hinnant's civil_from_days.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        sod / 3600,
        sod / 60 % 60,
        sod % 60
    )
}
