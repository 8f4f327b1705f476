//! A test identity provider: an Ed25519 key, its JWKS document, and JWTs
//! it signs for `serve --jwt-jwks`.

use serde_json::{json, Value};
use std::path::Path;

pub const ISSUER: &str = "https://idp.test";
pub const AUDIENCE: &str = "agentledger";

pub struct Provider {
    key: jsonwebtoken::EncodingKey,
    pub jwks: Value,
}

impl Provider {
    pub fn new() -> Self {
        use base64::Engine as _;
        let k = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
        let x = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(k.public_key_raw());
        Provider {
            key: jsonwebtoken::EncodingKey::from_ed_pem(k.serialize_pem().as_bytes()).unwrap(),
            jwks: json!({"keys":[{"kty":"OKP","crv":"Ed25519","kid":"k1","x":x}]}),
        }
    }

    /// Write the JWKS into `dir` and say the `serve` flags that trust it.
    pub fn serve_args(&self, dir: &Path) -> Vec<String> {
        let file = dir.join("jwks.json");
        std::fs::write(&file, self.jwks.to_string()).unwrap();
        [
            "--jwt-jwks",
            file.to_str().unwrap(),
            "--jwt-issuer",
            ISSUER,
            "--jwt-audience",
            AUDIENCE,
        ]
        .map(String::from)
        .to_vec()
    }

    /// A JWT for `sub` with `scopes` (space-separated), expiring at `exp`
    /// (seconds since the epoch).
    pub fn jwt(&self, sub: &str, scopes: &str, exp: u64) -> String {
        let header = jsonwebtoken::Header {
            kid: Some("k1".into()),
            ..jsonwebtoken::Header::new(jsonwebtoken::Algorithm::EdDSA)
        };
        let mut claims = json!({"sub": sub, "iss": ISSUER, "aud": AUDIENCE, "exp": exp});
        if !scopes.is_empty() {
            claims["scope"] = json!(scopes);
        }
        jsonwebtoken::encode(&header, &claims, &self.key).unwrap()
    }
}

/// Seconds since the epoch.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}
