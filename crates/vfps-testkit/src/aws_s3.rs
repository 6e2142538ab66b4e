//! A recording S3 double on loopback that answers as AWS S3 documents it
//! where real deployments differ from the stores we can run here (Garage
//! forgives what AWS refuses): a `PUT` or `POST` without `Content-Length` is
//! `411 MissingContentLength`; a missing key is `403 AccessDenied` when the
//! credentials lack `s3:ListBucket`; another bucket is `404 NoSuchBucket`;
//! part numbers run from 1 to 10,000; with SSE-KMS every upload of a part gets
//! a new ETag; temporary credentials must come with their session token,
//! signed. It also plays STS's `AssumeRoleWithWebIdentity` (at `POST /`),
//! handing out credentials that expire.
//!
//! Path-style addressing only. Signatures are checked for their shape (the
//! access key, the signed headers), not recomputed: the signing itself is
//! tested against AWS's and botocore's vectors.

use std::{
    collections::{BTreeMap, HashMap},
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::{Duration, SystemTime},
};

use self::{
    account::{authorized, sts},
    multipart::upload_op,
};
use axum::{
    body::{Body, Bytes},
    extract::State,
    http::{HeaderMap, Method, StatusCode, Uri},
    response::Response,
    Router,
};

/// How the double's account is set up.
#[derive(Debug, Clone)]
pub struct Behaviour {
    /// The one bucket there is.
    pub bucket: String,
    /// Whether the credentials hold `s3:ListBucket` (else a missing key is
    /// 403, as AWS answers then, and listing is denied).
    pub list_bucket: bool,
    /// The bucket encrypts with SSE-KMS: ETags are not the bytes' MD5, and
    /// the same bytes uploaded again get another.
    pub kms: bool,
    /// Which credentials are accepted.
    pub session: Session,
}

impl Behaviour {
    /// Bucket `vfps`, s3:ListBucket granted, no KMS, any credentials.
    pub fn new() -> Self {
        Self {
            bucket: "vfps".into(),
            list_bucket: true,
            kms: false,
            session: Session::Any,
        }
    }
}

impl Default for Behaviour {
    fn default() -> Self {
        Self::new()
    }
}

/// The credentials the double accepts.
#[derive(Debug, Clone)]
pub enum Session {
    /// Any key pair, no token.
    Any,
    /// Temporary credentials given out of band: this access key, only with
    /// this session token.
    Fixed { access_key: String, token: String },
    /// Only credentials its STS handed out for this role and web identity
    /// token, until they expire.
    Sts {
        role_arn: String,
        web_token: String,
        lifetime: Duration,
    },
}

/// One request as it arrived, and the status answered.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub query: String,
    /// Lowercase names.
    pub headers: BTreeMap<String, String>,
    pub status: u16,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }
}

#[derive(Default)]
struct Upload {
    key: String,
    parts: BTreeMap<u32, (String, Vec<u8>)>,
}

#[derive(Default)]
struct World {
    objects: BTreeMap<String, Vec<u8>>,
    uploads: HashMap<String, Upload>,
    /// Session token → (access key, expiry).
    tokens: HashMap<String, (String, SystemTime)>,
    requests: Vec<Recorded>,
    sts_calls: usize,
    counter: u64,
}

struct Shared {
    behaviour: Behaviour,
    world: Mutex<World>,
}

/// A running double; stopped when dropped.
pub struct AwsS3 {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for AwsS3 {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl AwsS3 {
    /// Serves `behaviour` on a loopback port.
    pub async fn start(behaviour: Behaviour) -> AwsS3 {
        let shared = Arc::new(Shared {
            world: Mutex::new(World::default()),
            behaviour: behaviour.clone(),
        });
        if let Session::Fixed { access_key, token } = &behaviour.session {
            let far = SystemTime::now() + Duration::from_secs(86_400);
            shared
                .world
                .lock()
                .expect("double")
                .tokens
                .insert(token.clone(), (access_key.clone(), far));
        }
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the S3 double");
        let addr = listener.local_addr().expect("the double's address");
        let app = Router::new().fallback(handle).with_state(shared.clone());
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.expect("the S3 double");
        });
        AwsS3 { addr, shared, task }
    }

    /// `http://127.0.0.1:<port>`: the S3 endpoint, and STS's.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn bucket(&self) -> &str {
        &self.shared.behaviour.bucket
    }

    /// Every request so far, in order.
    pub fn requests(&self) -> Vec<Recorded> {
        self.world().requests.clone()
    }

    /// How often STS handed out credentials.
    pub fn sts_calls(&self) -> usize {
        self.world().sts_calls
    }

    /// An object's bytes, if it exists.
    pub fn object(&self, key: &str) -> Option<Vec<u8>> {
        self.world().objects.get(key).cloned()
    }

    fn world(&self) -> std::sync::MutexGuard<'_, World> {
        self.shared.world.lock().expect("double")
    }
}

fn xml_error(status: StatusCode, code: &str, message: &str, head: bool) -> Response {
    let body = if head {
        Body::empty()
    } else {
        Body::from(format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code><Message>{message}</Message><RequestId>double</RequestId></Error>"
        ))
    };
    Response::builder()
        .status(status)
        .header("content-type", "application/xml")
        .body(body)
        .expect("a response")
}

fn ok_xml(body: String) -> Response {
    Response::builder()
        .header("content-type", "application/xml")
        .body(Body::from(body))
        .expect("a response")
}

fn status(code: StatusCode) -> Response {
    Response::builder()
        .status(code)
        .body(Body::empty())
        .expect("a response")
}

fn decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

fn query_pairs(query: &str) -> BTreeMap<String, String> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (decode(k), decode(&v.replace('+', "%20"))),
            None => (decode(p), String::new()),
        })
        .collect()
}

/// The text of each `<name>…</name>` in `xml`.
fn elements<'a>(xml: &'a str, name: &str) -> Vec<&'a str> {
    let (open, close) = (format!("<{name}>"), format!("</{name}>"));
    let mut found = Vec::new();
    let mut rest = xml;
    while let Some(at) = rest.find(&open) {
        let after = &rest[at + open.len()..];
        let Some(end) = after.find(&close) else { break };
        found.push(&after[..end]);
        rest = &after[end + close.len()..];
    }
    found
}

fn unescape(s: &str) -> String {
    s.replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

fn tag_of(bytes: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    let hex: String = digest.as_ref()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("\"{hex}\"")
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let response = answer(&shared, &method, &uri, &headers, &body);
    let recorded = Recorded {
        method: method.to_string(),
        path: uri.path().to_owned(),
        query: uri.query().unwrap_or_default().to_owned(),
        headers: headers
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_owned(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        status: response.status().as_u16(),
    };
    shared.world.lock().expect("double").requests.push(recorded);
    response
}

fn answer(
    shared: &Shared,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: &[u8],
) -> Response {
    let b = &shared.behaviour;
    let head = method == Method::HEAD;
    let query = query_pairs(uri.query().unwrap_or_default());
    let writes = method == Method::PUT || method == Method::POST;
    if writes
        && !headers.contains_key("content-length")
        && !headers.contains_key("transfer-encoding")
    {
        return xml_error(
            StatusCode::LENGTH_REQUIRED,
            "MissingContentLength",
            "You must provide the Content-Length HTTP header.",
            false,
        );
    }
    if method == Method::POST && uri.path() == "/" {
        return sts(shared, body);
    }
    if let Err(refused) = authorized(shared, headers, &query, head) {
        return *refused;
    }
    let path = uri.path().trim_start_matches('/');
    let (bucket, key) = match path.split_once('/') {
        Some((bucket, key)) => (decode(bucket), decode(key)),
        None => (decode(path), String::new()),
    };
    if bucket != b.bucket {
        return xml_error(
            StatusCode::NOT_FOUND,
            "NoSuchBucket",
            "The specified bucket does not exist",
            head,
        );
    }
    let mut world = shared.world.lock().expect("double");
    if key.is_empty() {
        return bucket_op(b, &mut world, method, &query, body);
    }
    let missing = |head: bool| {
        if b.list_bucket {
            xml_error(
                StatusCode::NOT_FOUND,
                "NoSuchKey",
                "The specified key does not exist.",
                head,
            )
        } else {
            xml_error(StatusCode::FORBIDDEN, "AccessDenied", "Access Denied", head)
        }
    };
    let upload_id = query.get("uploadId").cloned();
    match (method.clone(), upload_id) {
        (Method::HEAD, None) => match world.objects.get(&key) {
            Some(o) => Response::builder()
                .header("content-length", o.len())
                .header("etag", tag_of(o))
                .body(Body::empty())
                .expect("a response"),
            None => missing(true),
        },
        (Method::GET, None) => {
            let Some(o) = world.objects.get(&key) else {
                return missing(false);
            };
            let from = headers
                .get("range")
                .and_then(|r| r.to_str().ok())
                .and_then(|r| r.strip_prefix("bytes="))
                .and_then(|r| r.strip_suffix('-'))
                .and_then(|r| r.parse::<usize>().ok());
            match from {
                None => Response::new(Body::from(o.clone())),
                Some(from) if from >= o.len() => xml_error(
                    StatusCode::RANGE_NOT_SATISFIABLE,
                    "InvalidRange",
                    "The requested range is not satisfiable",
                    false,
                ),
                Some(from) => Response::builder()
                    .status(StatusCode::PARTIAL_CONTENT)
                    .header(
                        "content-range",
                        format!("bytes {from}-{}/{}", o.len() - 1, o.len()),
                    )
                    .body(Body::from(o[from..].to_vec()))
                    .expect("a response"),
            }
        }
        (Method::PUT, None) => {
            let tag = tag_of(body);
            world.objects.insert(key, body.to_vec());
            Response::builder()
                .header("etag", tag)
                .body(Body::empty())
                .expect("a response")
        }
        (Method::DELETE, None) => {
            world.objects.remove(&key);
            status(StatusCode::NO_CONTENT)
        }
        (Method::POST, None) if query.contains_key("uploads") => {
            world.counter += 1;
            let id = format!("upload-{}", world.counter);
            world.uploads.insert(
                id.clone(),
                Upload {
                    key: key.clone(),
                    ..Upload::default()
                },
            );
            ok_xml(format!(
                "<InitiateMultipartUploadResult><Bucket>{bucket}</Bucket><Key>{key}</Key><UploadId>{id}</UploadId></InitiateMultipartUploadResult>"
            ))
        }
        (method, Some(id)) => upload_op(b, &mut world, &method, &id, &key, &query, body),
        _ => xml_error(
            StatusCode::NOT_IMPLEMENTED,
            "NotImplemented",
            "not in the double",
            head,
        ),
    }
}

fn bucket_op(
    b: &Behaviour,
    world: &mut World,
    method: &Method,
    query: &BTreeMap<String, String>,
    body: &[u8],
) -> Response {
    let denied = |head| xml_error(StatusCode::FORBIDDEN, "AccessDenied", "Access Denied", head);
    match *method {
        Method::HEAD if b.list_bucket => status(StatusCode::OK),
        Method::HEAD => denied(true),
        Method::GET if query.get("list-type").map(String::as_str) == Some("2") => {
            if !b.list_bucket {
                return denied(false);
            }
            let prefix = query.get("prefix").cloned().unwrap_or_default();
            let max: usize = query
                .get("max-keys")
                .and_then(|m| m.parse().ok())
                .unwrap_or(1000);
            let after = query.get("continuation-token").cloned().unwrap_or_default();
            let keys: Vec<&String> = world
                .objects
                .keys()
                .filter(|k| k.starts_with(&prefix) && **k > after)
                .collect();
            let page = &keys[..keys.len().min(max)];
            let truncated = keys.len() > max;
            let mut xml = format!(
                "<ListBucketResult><Name>{}</Name><KeyCount>{}</KeyCount><IsTruncated>{truncated}</IsTruncated>",
                b.bucket,
                page.len()
            );
            for k in page {
                xml.push_str(&format!("<Contents><Key>{k}</Key></Contents>"));
            }
            if truncated {
                if let Some(last) = page.last() {
                    xml.push_str(&format!(
                        "<NextContinuationToken>{last}</NextContinuationToken>"
                    ));
                }
            }
            xml.push_str("</ListBucketResult>");
            ok_xml(xml)
        }
        Method::POST if query.contains_key("delete") => {
            let text = String::from_utf8_lossy(body);
            for key in elements(&text, "Key") {
                world.objects.remove(&unescape(key));
            }
            ok_xml("<DeleteResult></DeleteResult>".into())
        }
        Method::PUT if query.contains_key("lifecycle") || query.contains_key("cors") => {
            status(StatusCode::OK)
        }
        _ => xml_error(
            StatusCode::NOT_IMPLEMENTED,
            "NotImplemented",
            "not in the double",
            *method == Method::HEAD,
        ),
    }
}

mod account;
mod multipart;
