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
/// `finance:TOKEN` or `lead:TENANT:TOKEN`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenSpec {
    pub role: Role,
    pub token: String,
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

/// The configured tokens.
#[derive(Debug, Clone, Default)]
pub struct Tokens(BTreeMap<String, Role>);

impl Tokens {
    /// From the configured specs.
    pub fn new(specs: &[TokenSpec]) -> Self {
        Self(
            specs
                .iter()
                .map(|s| (s.token.clone(), s.role.clone()))
                .collect(),
        )
    }

    /// The role of an `Authorization` header's bearer token.
    pub fn role(&self, header: Option<&str>) -> Option<&Role> {
        let token = header?.strip_prefix("Bearer ")?.trim();
        self.0.get(token)
    }

    /// The role of a bare token (a PostgreSQL password).
    pub fn role_of_token(&self, token: &str) -> Option<&Role> {
        self.0.get(token)
    }

    /// Whether no token is configured.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
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
        let tokens = Tokens::new(&specs);
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
}
