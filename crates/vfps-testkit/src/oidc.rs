//! A real OIDC issuer for tests: an HTTP server on 127.0.0.1 serving the
//! discovery document and a JWKS of generated ECDSA P-256 keys, and minting
//! tokens signed with them — good ones, and every kind of bad one a service
//! must refuse. Its token endpoint answers refresh-token grants (as a
//! provider renews a UI sign-in) with an ID token carrying the user's roles
//! as they are now.

#![allow(clippy::unwrap_used)]

use std::{
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::{SystemTime, UNIX_EPOCH},
};

use base64::{engine::general_purpose::URL_SAFE_NO_PAD, Engine as _};
use ring::{
    rand::SystemRandom,
    signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING},
};
use serde_json::{json, Value};

/// The audience tokens carry unless a test says otherwise.
pub const AUDIENCE: &str = "vfps";
/// The admin UI's client: the audience of the ID tokens the token endpoint
/// issues.
pub const UI_CLIENT: &str = "vfps-ui";

struct SigningKey {
    kid: String,
    pkcs8: Vec<u8>,
    /// Uncompressed point 0x04 ‖ x ‖ y.
    public: Vec<u8>,
}

impl SigningKey {
    fn generate(kid: &str) -> Self {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .unwrap()
            .as_ref()
            .to_vec();
        let pair =
            EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &pkcs8, &rng).unwrap();
        Self {
            kid: kid.to_owned(),
            public: pair.public_key().as_ref().to_vec(),
            pkcs8,
        }
    }

    fn jwk(&self) -> Value {
        json!({
            "kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256", "kid": self.kid,
            "x": URL_SAFE_NO_PAD.encode(&self.public[1..33]),
            "y": URL_SAFE_NO_PAD.encode(&self.public[33..65]),
        })
    }

    fn sign(&self, claims: &Value) -> String {
        let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256);
        header.kid = Some(self.kid.clone());
        jsonwebtoken::encode(
            &header,
            claims,
            &jsonwebtoken::EncodingKey::from_ec_der(&self.pkcs8),
        )
        .unwrap()
    }
}

struct State {
    /// Published in the JWKS, newest last; the newest signs.
    published: Vec<SigningKey>,
    generation: usize,
    /// Refresh tokens still good, and whose they are.
    refresh: std::collections::HashMap<String, String>,
    /// Each user's roles as they are now.
    roles: std::collections::HashMap<String, Vec<String>>,
    /// Refresh grants answered.
    refreshes: usize,
}

/// A running issuer; stops when dropped.
pub struct OidcIssuer {
    /// The issuer URL (`Authorization__Authority`), `http://127.0.0.1:<port>`.
    pub url: String,
    state: Arc<Mutex<State>>,
    jwks_fetches: Arc<AtomicUsize>,
    /// While set, the JWKS answers 500 (and still counts as fetched).
    failing: Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for OidcIssuer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

impl OidcIssuer {
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let state = Arc::new(Mutex::new(State {
            published: vec![SigningKey::generate("key-0")],
            generation: 0,
            refresh: Default::default(),
            roles: Default::default(),
            refreshes: 0,
        }));
        let jwks_fetches = Arc::new(AtomicUsize::new(0));
        let failing = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let discovery = json!({
            "issuer": url,
            "jwks_uri": format!("{url}/jwks"),
            "authorization_endpoint": format!("{url}/authorize"),
            "token_endpoint": format!("{url}/token"),
            "id_token_signing_alg_values_supported": ["ES256"],
        });
        let router = axum::Router::new()
            .route(
                "/.well-known/openid-configuration",
                axum::routing::get(move || {
                    let d = discovery.clone();
                    async move { axum::Json(d) }
                }),
            )
            .route(
                "/jwks",
                axum::routing::get({
                    let state = state.clone();
                    let fetches = jwks_fetches.clone();
                    let failing = failing.clone();
                    move || {
                        fetches.fetch_add(1, Ordering::SeqCst);
                        let keys: Vec<Value> = state
                            .lock()
                            .unwrap()
                            .published
                            .iter()
                            .map(SigningKey::jwk)
                            .collect();
                        let failing = failing.load(Ordering::SeqCst);
                        async move {
                            if failing {
                                Err(axum::http::StatusCode::INTERNAL_SERVER_ERROR)
                            } else {
                                Ok(axum::Json(json!({ "keys": keys })))
                            }
                        }
                    }
                }),
            );
        let router = router.route(
            "/token",
            axum::routing::post({
                let (state, issuer) = (state.clone(), url.clone());
                move |body: axum::body::Bytes| {
                    let answer = refresh_grant(&state, &issuer, &body);
                    async move {
                        match answer {
                            Ok(a) => Ok(axum::Json(a)),
                            Err(e) => Err((axum::http::StatusCode::BAD_REQUEST, axum::Json(e))),
                        }
                    }
                }
            }),
        );
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        Self {
            url,
            state,
            jwks_fetches,
            failing,
            task,
        }
    }

    /// A refresh token for `sub`, whose roles are `roles` from now on (as a
    /// sign-in that issued one would leave them).
    pub fn refresh_token(&self, sub: &str, roles: &[&str]) -> String {
        self.set_roles(sub, roles);
        let token = format!("rt-{}", URL_SAFE_NO_PAD.encode(random_bytes()));
        self.state
            .lock()
            .unwrap()
            .refresh
            .insert(token.clone(), sub.to_owned());
        token
    }

    /// `sub`'s roles from now on (what the next refresh says).
    pub fn set_roles(&self, sub: &str, roles: &[&str]) {
        self.state.lock().unwrap().roles.insert(
            sub.to_owned(),
            roles.iter().map(|r| (*r).to_owned()).collect(),
        );
    }

    /// Every refresh token of `sub` refused from now on (the user disabled,
    /// their sessions at the provider ended).
    pub fn revoke_refresh_tokens(&self, sub: &str) {
        self.state.lock().unwrap().refresh.retain(|_, s| s != sub);
    }

    /// Refresh grants answered so far.
    pub fn refreshes(&self) -> usize {
        self.state.lock().unwrap().refreshes
    }

    /// Claims of a valid token for `sub` with `roles`, valid for five minutes.
    pub fn claims(&self, sub: &str, roles: &[&str]) -> Value {
        let t = now();
        json!({
            "iss": self.url, "aud": AUDIENCE, "sub": sub,
            "iat": t, "nbf": t, "exp": t + 300, "roles": roles,
        })
    }

    /// `claims` signed with the current key.
    pub fn sign(&self, claims: &Value) -> String {
        self.state
            .lock()
            .unwrap()
            .published
            .last()
            .unwrap()
            .sign(claims)
    }

    /// A valid token for `sub` with `roles`.
    pub fn token(&self, sub: &str, roles: &[&str]) -> String {
        self.sign(&self.claims(sub, roles))
    }

    /// Publishes a new key, which signs from now on; the old ones stay published.
    pub fn rotate(&self) {
        let mut s = self.state.lock().unwrap();
        s.generation += 1;
        let key = SigningKey::generate(&format!("key-{}", s.generation));
        s.published.push(key);
    }

    /// The kid of the key that signs now.
    fn current_kid(&self) -> String {
        let s = self.state.lock().unwrap();
        s.published.last().unwrap().kid.clone()
    }

    /// Signed with a key this issuer never published, under a kid it does publish.
    pub fn forged(&self, claims: &Value) -> String {
        let kid = self.current_kid();
        SigningKey::generate(&kid).sign(claims)
    }

    /// `alg: none`, no signature.
    pub fn unsigned(&self, claims: &Value) -> String {
        let kid = self.current_kid();
        let header = json!({"alg": "none", "typ": "JWT", "kid": kid});
        format!(
            "{}.{}.",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        )
    }

    /// HS256 with the current public key as the HMAC secret: the
    /// algorithm-confusion attack.
    pub fn hs256_with_public_key(&self, claims: &Value) -> String {
        let s = self.state.lock().unwrap();
        let key = s.published.last().unwrap();
        let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256);
        header.kid = Some(key.kid.clone());
        jsonwebtoken::encode(
            &header,
            claims,
            &jsonwebtoken::EncodingKey::from_secret(&key.public),
        )
        .unwrap()
    }

    /// Makes the JWKS answer 500 (`true`) or its keys again (`false`).
    pub fn fail(&self, failing: bool) {
        self.failing.store(failing, Ordering::SeqCst);
    }

    /// How many times the JWKS was fetched.
    pub fn jwks_fetches(&self) -> usize {
        self.jwks_fetches.load(Ordering::SeqCst)
    }
}

fn random_bytes() -> [u8; 18] {
    let mut b = [0u8; 18];
    ring::rand::SecureRandom::fill(&SystemRandom::new(), &mut b).unwrap();
    b
}

/// A `grant_type=refresh_token` request's answer: a new ID token for the
/// UI's client with the user's roles now, and a new refresh token (the old
/// one is spent); `invalid_grant` for a token unknown or revoked.
fn refresh_grant(state: &Mutex<State>, issuer: &str, body: &[u8]) -> Result<Value, Value> {
    let form: std::collections::HashMap<String, String> = String::from_utf8_lossy(body)
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| {
            let decode = |s: &str| {
                percent_encoding::percent_decode_str(&s.replace('+', " "))
                    .decode_utf8_lossy()
                    .into_owned()
            };
            (decode(k), decode(v))
        })
        .collect();
    let refused = || json!({"error": "invalid_grant"});
    if form.get("grant_type").map(String::as_str) != Some("refresh_token") {
        return Err(json!({"error": "unsupported_grant_type"}));
    }
    let mut s = state.lock().unwrap();
    let sub = form
        .get("refresh_token")
        .and_then(|t| s.refresh.remove(t))
        .ok_or_else(refused)?;
    let roles = s.roles.get(&sub).cloned().unwrap_or_default();
    let t = now();
    let claims = json!({
        "iss": issuer, "aud": UI_CLIENT, "sub": sub, "iat": t, "nbf": t, "exp": t + 300,
        "roles": roles, "name": sub,
    });
    let id_token = s.published.last().unwrap().sign(&claims);
    let next = format!("rt-{}", URL_SAFE_NO_PAD.encode(random_bytes()));
    s.refresh.insert(next.clone(), sub);
    s.refreshes += 1;
    Ok(json!({
        "access_token": "opaque",
        "token_type": "Bearer",
        "expires_in": 300,
        "id_token": id_token,
        "refresh_token": next,
    }))
}
