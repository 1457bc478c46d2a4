//! SCRAM-SHA-256 (RFC 5802, RFC 7677) for PostgreSQL logins whose
//! password is a query token.
//!
//! The client proves it knows a token without sending it. The user name
//! is free, so the server does not know which token to expect: it keeps,
//! for every configured token, the keys SCRAM derives from it (under one
//! salt per service start), and the proof is checked against each. The
//! server's own signature, sent last, proves to the client that the
//! server knows the token too.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use ring::rand::{SecureRandom, SystemRandom};
use ring::{digest, hmac, pbkdf2};

use gpuledger_common::auth::{Role, Tokens, same_secret};

/// The mechanism's name in `AuthenticationSASL`.
pub(crate) const MECHANISM: &str = "SCRAM-SHA-256";

/// PBKDF2 rounds: PostgreSQL's default.
const ITERATIONS: u32 = 4096;

/// The keys derived from one token.
#[derive(Clone)]
struct Keys {
    stored: [u8; 32],
    server: [u8; 32],
    role: Role,
}

/// What the server keeps to check proofs: the salt and every token's keys.
#[derive(Clone)]
pub(crate) struct Verifier {
    salt: [u8; 16],
    keys: Vec<Keys>,
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verifier")
            .field("tokens", &self.keys.len())
            .finish_non_exhaustive()
    }
}

fn hmac_sha256(key: &[u8], data: &[u8]) -> [u8; 32] {
    let tag = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, key), data);
    let mut out = [0u8; 32];
    out.copy_from_slice(tag.as_ref());
    out
}

fn sha256(data: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(digest::digest(&digest::SHA256, data).as_ref());
    out
}

/// Why a SCRAM exchange failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ScramError {
    #[error("the SCRAM message is malformed: {0}")]
    Malformed(&'static str),
    #[error("channel binding is not offered by this server")]
    ChannelBinding,
    #[error("the SCRAM nonce does not match")]
    Nonce,
    #[error("password authentication failed: the password is a gpuledger query token")]
    NoToken,
}

/// Where an exchange stands after the client's first message.
#[derive(Debug, Clone)]
pub(crate) struct Exchange {
    client_first_bare: String,
    server_first: String,
    nonce: String,
    gs2_header: String,
}

impl Exchange {
    /// The server's first message.
    pub(crate) fn server_first(&self) -> &str {
        &self.server_first
    }
}

impl Verifier {
    /// The keys of every token in `tokens`, under a fresh salt.
    pub(crate) fn new(tokens: &Tokens) -> Self {
        let mut salt = [0u8; 16];
        SystemRandom::new()
            .fill(&mut salt)
            .unwrap_or_else(|_| unreachable!("the system's randomness is readable"));
        let keys = tokens
            .secrets()
            .map(|(token, role)| {
                let mut salted = [0u8; 32];
                pbkdf2::derive(
                    pbkdf2::PBKDF2_HMAC_SHA256,
                    std::num::NonZeroU32::new(ITERATIONS).unwrap_or(std::num::NonZeroU32::MIN),
                    &salt,
                    token,
                    &mut salted,
                );
                Keys {
                    stored: sha256(&hmac_sha256(&salted, b"Client Key")),
                    server: hmac_sha256(&salted, b"Server Key"),
                    role: role.clone(),
                }
            })
            .collect();
        Self { salt, keys }
    }

    /// Reads the client's first message and makes the server's first.
    pub(crate) fn first(&self, client_first: &[u8]) -> Result<Exchange, ScramError> {
        let text =
            std::str::from_utf8(client_first).map_err(|_| ScramError::Malformed("not UTF-8"))?;
        // gs2-header: "n,," (no binding) or "y,," (the client could bind,
        // the server offered none); "p=…" asks for binding we do not offer.
        let (binding, rest) = text
            .split_once(',')
            .ok_or(ScramError::Malformed("no gs2 header"))?;
        let (authzid, bare) = rest
            .split_once(',')
            .ok_or(ScramError::Malformed("no gs2 header"))?;
        match binding {
            "n" | "y" => {}
            b if b.starts_with("p=") => return Err(ScramError::ChannelBinding),
            _ => return Err(ScramError::Malformed("gs2 binding flag")),
        }
        let client_nonce = bare
            .split(',')
            .find_map(|part| part.strip_prefix("r="))
            .filter(|n| !n.is_empty())
            .ok_or(ScramError::Malformed("no client nonce"))?;
        let mut ours = [0u8; 18];
        SystemRandom::new()
            .fill(&mut ours)
            .map_err(|_| ScramError::Malformed("no randomness"))?;
        let nonce = format!("{client_nonce}{}", B64.encode(ours));
        let server_first = format!("r={nonce},s={},i={ITERATIONS}", B64.encode(self.salt));
        Ok(Exchange {
            client_first_bare: bare.to_owned(),
            server_first,
            nonce,
            gs2_header: format!("{binding},{authzid},"),
        })
    }

    /// Checks the client's final message: the role of the token it proves,
    /// and the server's final message.
    pub(crate) fn last(
        &self,
        exchange: &Exchange,
        client_final: &[u8],
    ) -> Result<(Role, String), ScramError> {
        let text =
            std::str::from_utf8(client_final).map_err(|_| ScramError::Malformed("not UTF-8"))?;
        let (without_proof, proof) = text
            .rsplit_once(",p=")
            .ok_or(ScramError::Malformed("no proof"))?;
        let mut binding = None;
        let mut nonce = None;
        for part in without_proof.split(',') {
            if let Some(c) = part.strip_prefix("c=") {
                binding = Some(c);
            } else if let Some(r) = part.strip_prefix("r=") {
                nonce = Some(r);
            }
        }
        if binding != Some(B64.encode(exchange.gs2_header.as_bytes()).as_str()) {
            return Err(ScramError::ChannelBinding);
        }
        if nonce != Some(exchange.nonce.as_str()) {
            return Err(ScramError::Nonce);
        }
        let proof = B64
            .decode(proof)
            .map_err(|_| ScramError::Malformed("proof is not base64"))?;
        if proof.len() != 32 {
            return Err(ScramError::Malformed("proof length"));
        }
        let auth_message = format!(
            "{},{},{without_proof}",
            exchange.client_first_bare, exchange.server_first
        );
        // Every token is tried, the match or not.
        let mut found: Option<&Keys> = None;
        for keys in &self.keys {
            let signature = hmac_sha256(&keys.stored, auth_message.as_bytes());
            let client_key: Vec<u8> = proof.iter().zip(signature).map(|(p, s)| p ^ s).collect();
            if same_secret(&sha256(&client_key), &keys.stored) {
                found = Some(keys);
            }
        }
        let keys = found.ok_or(ScramError::NoToken)?;
        let server_signature = hmac_sha256(&keys.server, auth_message.as_bytes());
        Ok((
            keys.role.clone(),
            format!("v={}", B64.encode(server_signature)),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuledger_common::auth::TokenSpec;

    /// A client's side of the exchange, as RFC 5802 has it.
    fn client_proof(
        token: &str,
        client_first_bare: &str,
        server_first: &str,
    ) -> (String, [u8; 32]) {
        let parts: Vec<&str> = server_first.split(',').collect();
        let nonce = parts[0].strip_prefix("r=").unwrap();
        let salt = B64.decode(parts[1].strip_prefix("s=").unwrap()).unwrap();
        let iterations: u32 = parts[2].strip_prefix("i=").unwrap().parse().unwrap();
        let mut salted = [0u8; 32];
        pbkdf2::derive(
            pbkdf2::PBKDF2_HMAC_SHA256,
            std::num::NonZeroU32::new(iterations).unwrap(),
            &salt,
            token.as_bytes(),
            &mut salted,
        );
        let client_key = hmac_sha256(&salted, b"Client Key");
        let stored = sha256(&client_key);
        let without_proof = format!("c=biws,r={nonce}");
        let auth = format!("{client_first_bare},{server_first},{without_proof}");
        let signature = hmac_sha256(&stored, auth.as_bytes());
        let proof: Vec<u8> = client_key
            .iter()
            .zip(signature)
            .map(|(k, s)| k ^ s)
            .collect();
        let server_key = hmac_sha256(&salted, b"Server Key");
        (
            format!("{without_proof},p={}", B64.encode(proof)),
            hmac_sha256(&server_key, auth.as_bytes()),
        )
    }

    fn tokens() -> Tokens {
        let specs: Vec<TokenSpec> = ["admin:admin-secret", "lead:team-a:lead-secret"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        Tokens::new(&specs).unwrap()
    }

    #[test]
    fn a_client_that_knows_a_token_logs_in_as_its_role() {
        let verifier = Verifier::new(&tokens());
        let bare = "n=anyone,r=rOprNGfwEbeRWgbNEkqO";
        let exchange = verifier.first(format!("n,,{bare}").as_bytes()).unwrap();
        let (last, expected_server) = client_proof("lead-secret", bare, &exchange.server_first);
        let (role, server_final) = verifier.last(&exchange, last.as_bytes()).unwrap();
        assert_eq!(
            role,
            Role::TeamLead {
                tenant: "team-a".into()
            }
        );
        assert_eq!(server_final, format!("v={}", B64.encode(expected_server)));
    }

    #[test]
    fn a_wrong_token_a_replayed_nonce_or_binding_is_refused() {
        let verifier = Verifier::new(&tokens());
        let bare = "n=x,r=abc";
        let exchange = verifier.first(format!("n,,{bare}").as_bytes()).unwrap();
        let (last, _) = client_proof("not-a-token", bare, &exchange.server_first);
        assert_eq!(
            verifier.last(&exchange, last.as_bytes()),
            Err(ScramError::NoToken)
        );
        let (last, _) = client_proof("admin-secret", bare, &exchange.server_first);
        let tampered = last.replace(&exchange.nonce, "abcOTHER");
        assert_eq!(
            verifier.last(&exchange, tampered.as_bytes()),
            Err(ScramError::Nonce)
        );
        assert_eq!(
            verifier
                .first(b"p=tls-server-end-point,,n=x,r=abc")
                .unwrap_err(),
            ScramError::ChannelBinding
        );
        assert!(verifier.first(b"garbage").is_err());
    }
}
