//! Bearer tokens and roles, shared by the control API (DESIGN §8) and the
//! query service (DESIGN §7). Each service decides what a role may do there:
//! the processor lets no finance token write, the query service lets no
//! scheduler token read.

use std::collections::BTreeMap;
use std::str::FromStr;

/// What a token may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// Everything, including `Clock` events.
    Admin,
    /// Admission requests and lifecycle events, for any tenant.
    Scheduler,
    /// Reads every tenant's figures; writes nothing.
    Finance,
    /// Reservations and reads for one tenant only.
    TeamLead { tenant: String },
}

/// One configured token: `admin:TOKEN`, `scheduler:TOKEN`,
/// `finance:TOKEN` or `lead:TENANT:TOKEN`. Its `Debug` shows the role
/// only.
#[derive(Clone, PartialEq, Eq)]
pub struct TokenSpec {
    pub role: Role,
    pub token: String,
}

impl std::fmt::Debug for TokenSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenSpec")
            .field("role", &self.role)
            .field("token", &"…")
            .finish()
    }
}

/// A token setting as given on the command line or in the environment,
/// not yet read: clap takes it as it is, so that no error of clap's ever
/// prints it; [`Tokens::parse`] reads it. Its `Debug` shows nothing of it.
#[derive(Clone, PartialEq, Eq)]
pub struct TokenArg(String);

impl FromStr for TokenArg {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(TokenArg(s.to_owned()))
    }
}

impl From<String> for TokenArg {
    fn from(s: String) -> Self {
        TokenArg(s)
    }
}

impl TokenArg {
    /// The setting itself, for the one place that must hand it on (a
    /// client library's password setting).
    pub fn reveal(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for TokenArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenArg(…)")
    }
}

impl FromStr for TokenSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || {
            format!(
                "API token {:?} is not admin:TOKEN, scheduler:TOKEN, finance:TOKEN or lead:TENANT:TOKEN",
                redact(s)
            )
        };
        let (role, rest) = s.split_once(':').ok_or_else(bad)?;
        let (role, token) = match role {
            "admin" => (Role::Admin, rest),
            "scheduler" => (Role::Scheduler, rest),
            "finance" => (Role::Finance, rest),
            "lead" => {
                let (tenant, token) = rest.split_once(':').ok_or_else(bad)?;
                (
                    Role::TeamLead {
                        tenant: tenant.to_owned(),
                    },
                    token,
                )
            }
            _ => return Err(bad()),
        };
        if token.len() < 8 {
            return Err(format!(
                "API token for {role:?} must be at least 8 characters"
            ));
        }
        Ok(TokenSpec {
            role,
            token: token.to_owned(),
        })
    }
}

fn redact(s: &str) -> String {
    match s.rsplit_once(':') {
        Some((head, _)) => format!("{head}:…"),
        None => "…".to_owned(),
    }
}

/// The configured tokens. A token is found by comparing it with every
/// configured one in time that does not depend on where they differ; its
/// `Debug` lists the roles only.
#[derive(Clone, Default)]
pub struct Tokens(Vec<(Vec<u8>, Role)>);

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|(_, role)| role))
            .finish()
    }
}

impl Tokens {
    /// From the configured specs; a token given twice is refused, whether
    /// for the same role or another (it would be one or the other).
    pub fn new(specs: &[TokenSpec]) -> Result<Self, String> {
        let mut seen = BTreeMap::new();
        for (i, spec) in specs.iter().enumerate() {
            if let Some(first) = seen.insert(spec.token.as_str(), i) {
                return Err(format!(
                    "API tokens {} ({:?}) and {} ({:?}) are the same token: each must be its own",
                    first + 1,
                    specs[first].role,
                    i + 1,
                    spec.role
                ));
            }
        }
        Ok(Self(
            specs
                .iter()
                .map(|s| (s.token.as_bytes().to_vec(), s.role.clone()))
                .collect(),
        ))
    }

    /// Reads the token settings as given (`role:TOKEN`, …); errors never
    /// show a token.
    pub fn parse(args: &[TokenArg]) -> Result<Self, String> {
        let specs = args
            .iter()
            .map(|a| a.0.parse::<TokenSpec>())
            .collect::<Result<Vec<_>, _>>()?;
        Self::new(&specs)
    }

    /// The role of an `Authorization` header's bearer token.
    pub fn role(&self, header: Option<&str>) -> Option<&Role> {
        let token = header?.strip_prefix("Bearer ")?.trim();
        self.role_of_token(token)
    }

    /// The role of a bare token (a PostgreSQL password).
    pub fn role_of_token(&self, token: &str) -> Option<&Role> {
        // Every configured token is compared, the match or not.
        self.0.iter().fold(None, |found, (known, role)| {
            if same_secret(known, token.as_bytes()) {
                Some(role)
            } else {
                found
            }
        })
    }

    /// Every configured token with its role: for a service that must
    /// derive keys from them (SCRAM), never to show.
    pub fn secrets(&self) -> impl Iterator<Item = (&[u8], &Role)> {
        self.0.iter().map(|(token, role)| (token.as_slice(), role))
    }

    /// Whether no token is configured.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Whether `a` and `b` are equal, in time that depends on their lengths
/// only, not on where they first differ.
pub fn same_secret(a: &[u8], b: &[u8]) -> bool {
    let mut diff = (a.len() ^ b.len()) as u64;
    for i in 0..a.len().max(b.len()) {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= u64::from(std::hint::black_box(x ^ y));
    }
    diff == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_and_roles_resolve() {
        let specs: Vec<TokenSpec> = [
            "admin:adminsecret",
            "scheduler:schedsecret",
            "finance:financesecret",
            "lead:team-a:leadsecret",
        ]
        .iter()
        .map(|s| s.parse().unwrap())
        .collect();
        let tokens = Tokens::new(&specs).unwrap();
        assert_eq!(tokens.role(Some("Bearer adminsecret")), Some(&Role::Admin));
        assert_eq!(
            tokens.role(Some("Bearer leadsecret")),
            Some(&Role::TeamLead {
                tenant: "team-a".into()
            })
        );
        assert_eq!(
            tokens.role(Some("Bearer financesecret")),
            Some(&Role::Finance)
        );
        assert_eq!(tokens.role(Some("Bearer nope")), None);
        assert_eq!(tokens.role(Some("adminsecret")), None);
        assert_eq!(tokens.role(None), None);
        assert!("root:whatever".parse::<TokenSpec>().is_err());
        assert!("admin:short".parse::<TokenSpec>().is_err());
        let err = "boss:team:supersecret".parse::<TokenSpec>().unwrap_err();
        assert!(!err.contains("supersecret"), "{err}");
    }

    #[test]
    fn tokens_are_never_shown_and_never_given_twice() {
        let args: Vec<TokenArg> = ["admin:adminsecret", "lead:team-a:adminsecret"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        let err = Tokens::parse(&args).unwrap_err();
        assert!(err.contains("same token"), "{err}");
        assert!(!err.contains("adminsecret"), "{err}");
        assert!(!format!("{args:?}").contains("adminsecret"));
        let short: Vec<TokenArg> = vec!["admin:short".parse().unwrap()];
        let err = Tokens::parse(&short).unwrap_err();
        assert!(!err.contains("short"), "{err}");
        let tokens = Tokens::parse(&args[..1]).unwrap();
        assert!(!format!("{tokens:?}").contains("adminsecret"));
        let spec: TokenSpec = "finance:financesecret".parse().unwrap();
        assert!(!format!("{spec:?}").contains("financesecret"));
    }

    #[test]
    fn secrets_compare_equal_only_when_equal() {
        assert!(same_secret(b"abcdefgh", b"abcdefgh"));
        assert!(!same_secret(b"abcdefgh", b"abcdefgi"));
        assert!(!same_secret(b"abcdefgh", b"abcdefgh "));
        assert!(!same_secret(b"", b"a"));
        assert!(same_secret(b"", b""));
    }
}
