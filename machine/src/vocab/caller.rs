//! Who is calling: the verified principal and the roles it holds, per
//! project. The shell authenticates (checks a key, a token or a
//! certificate) and hands the machine a [`Caller`]; the machine alone
//! decides what that caller may do (`crate::ops::stages::authorize`).
//!
//! Invariant: a [`Principal`] reaches the machine only after the shell has
//! verified its credential, so every grant here is trusted data.

use agentsessions_proto::v1::IdentityRef;

/// The principal the host records as the actor of the decisions it makes
/// itself (an approval request denied at its deadline). No caller may
/// decide under it: an Approve naming it (or verified as it) is refused.
pub const HOST_PRINCIPAL: &str = "agentsessions:host";

/// The identity of the host's own decisions (see [`HOST_PRINCIPAL`]).
pub fn host_identity() -> IdentityRef {
    IdentityRef {
        principal: HOST_PRINCIPAL.to_owned(),
        issuer: "agentsessions".to_owned(),
        subject: String::new(),
    }
}

/// The caller of one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// Authentication is off (no `--auth`), or the host itself is calling
    /// (Boot, Retain): everything is permitted and any identity the client
    /// wrote is recorded as written.
    Open,
    /// A principal whose credential the shell verified.
    Verified(Principal),
}

impl Caller {
    /// The identity recorded as the actor of the records this caller's
    /// request writes: the verified principal, or none when auth is off.
    pub fn actor(&self) -> Option<IdentityRef> {
        match self {
            Self::Open => None,
            Self::Verified(p) => Some(p.identity()),
        }
    }
}

/// A verified principal.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Principal {
    /// The principal's name (API key principal, JWT `sub`, certificate
    /// SAN URI or CN).
    pub name: String,
    /// Who vouched for it: a JWT `iss`, `"api-key"` or `"mtls"`.
    pub issuer: String,
    /// What it may do, per project.
    pub grants: Vec<Grant>,
    /// When set, it may not approve calls of sessions it created.
    pub separate_approver: bool,
}

impl Principal {
    /// The identity written on records and compared with session creators.
    pub fn identity(&self) -> IdentityRef {
        // "api-key", "mtls", or the JWT issuer the auth file must name: a
        // verified caller's identity is never the empty one (no actor).
        debug_assert!(
            !self.issuer.is_empty(),
            "a verified principal has an issuer"
        );
        IdentityRef {
            principal: self.name.clone(),
            issuer: self.issuer.clone(),
            subject: String::new(),
        }
    }

    /// True when some grant gives `role` on `project`.
    pub fn may(&self, role: Role, project: &str) -> bool {
        let may = self
            .grants
            .iter()
            .any(|g| g.role.implies(role) && g.scope.covers(project));
        debug_assert!(
            !may || self.may_somewhere(role),
            "a grant on one project is a grant somewhere"
        );
        may
    }

    /// True when some grant gives `role` on every project.
    pub fn may_everywhere(&self, role: Role) -> bool {
        let may = self
            .grants
            .iter()
            .any(|g| g.role.implies(role) && g.scope == Scope::Any);
        debug_assert!(
            !may || self.may_somewhere(role),
            "a grant everywhere is a grant somewhere"
        );
        may
    }

    /// True when some grant gives `role` on at least one project.
    pub fn may_somewhere(&self, role: Role) -> bool {
        self.grants.iter().any(|g| g.role.implies(role))
    }
}

/// One role on one project (or every project).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Grant {
    /// Where the role applies.
    pub scope: Scope,
    /// The role.
    pub role: Role,
}

/// Where a grant applies.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scope {
    /// `*`: every project.
    Any,
    /// Exactly this project.
    Project(String),
}

impl Scope {
    fn covers(&self, project: &str) -> bool {
        // Only parsing builds a project scope, and it maps "" and "*" away.
        debug_assert!(
            !matches!(self, Self::Project(p) if p.is_empty() || p == "*"),
            "a project scope names one project"
        );
        match self {
            Self::Any => true,
            Self::Project(p) => p == project,
        }
    }
}

/// What a grant lets a principal do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// GetSession, ListSessions, Replay (and so `agentctl verify`).
    Reader,
    /// Reader, plus Create, Exec, Fork, Suspend, Resume, Cancel, Delete.
    Writer,
    /// Reader, plus Approve. A writer is not an approver: separating the
    /// two is the point of the gate.
    Approver,
    /// Everything, and the harness registry (with the `*` scope).
    Admin,
}

impl Role {
    /// True when holding `self` grants `wanted`.
    pub fn implies(self, wanted: Role) -> bool {
        let implies = match self {
            Self::Admin => true,
            Self::Writer | Self::Approver => wanted == self || wanted == Self::Reader,
            Self::Reader => wanted == Self::Reader,
        };
        debug_assert!(
            implies || (wanted != self && wanted != Self::Reader),
            "every role implies itself and reader"
        );
        implies
    }

    /// The role's name as configured.
    pub fn name(self) -> &'static str {
        let name = match self {
            Self::Reader => "reader",
            Self::Writer => "writer",
            Self::Approver => "approver",
            Self::Admin => "admin",
        };
        debug_assert!(!name.contains(':'), "the role follows a grant's last ':'");
        name
    }
}

/// A grant string that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrantError {
    /// No `:` between project and role.
    #[error("grant {0:?} is not \"project:role\"")]
    Shape(String),
    /// The project part is empty.
    #[error("grant {0:?} names no project (use \"*\" for every project)")]
    NoProject(String),
    /// The role is not one of reader, writer, approver, admin.
    #[error("grant {0:?}: unknown role (reader, writer, approver or admin)")]
    Role(String),
}

impl std::str::FromStr for Grant {
    type Err = GrantError;

    /// Parses `"project:role"`; the role follows the last `:`, so a project
    /// name may itself contain one.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (project, role_name) = s
            .rsplit_once(':')
            .ok_or_else(|| GrantError::Shape(s.to_owned()))?;
        let role = match role_name {
            "reader" => Role::Reader,
            "writer" => Role::Writer,
            "approver" => Role::Approver,
            "admin" => Role::Admin,
            _ => return Err(GrantError::Role(s.to_owned())),
        };
        debug_assert_eq!(role.name(), role_name, "parsing and Role::name agree");
        let scope = match project {
            "" => return Err(GrantError::NoProject(s.to_owned())),
            "*" => Scope::Any,
            p => Scope::Project(p.to_owned()),
        };
        Ok(Self { scope, role })
    }
}

impl std::fmt::Display for Grant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let project = match &self.scope {
            Scope::Any => "*",
            Scope::Project(p) => p.as_str(),
        };
        debug_assert_eq!(
            format!("{project}:{}", self.role.name())
                .parse::<Self>()
                .as_ref(),
            Ok(self),
            "a grant prints as it parses"
        );
        write!(f, "{project}:{}", self.role.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn principal(grants: &[&str]) -> Principal {
        Principal {
            name: "p".into(),
            issuer: "api-key".into(),
            grants: grants.iter().map(|g| g.parse().unwrap()).collect(),
            separate_approver: false,
        }
    }

    #[test]
    fn grants_parse_and_print_back() {
        for s in ["default:writer", "*:reader", "a:b:approver", "x:admin"] {
            assert_eq!(s.parse::<Grant>().unwrap().to_string(), s);
        }
        assert!(matches!(
            "writer".parse::<Grant>(),
            Err(GrantError::Shape(_))
        ));
        assert!(matches!(
            ":writer".parse::<Grant>(),
            Err(GrantError::NoProject(_))
        ));
        assert!(matches!(
            "p:owner".parse::<Grant>(),
            Err(GrantError::Role(_))
        ));
    }

    #[test]
    fn a_writer_reads_but_does_not_approve_and_an_admin_does_everything() {
        let w = principal(&["a:writer"]);
        assert!(w.may(Role::Reader, "a") && w.may(Role::Writer, "a"));
        assert!(!w.may(Role::Approver, "a") && !w.may(Role::Reader, "b"));
        let ap = principal(&["a:approver"]);
        assert!(ap.may(Role::Reader, "a") && !ap.may(Role::Writer, "a"));
        let admin = principal(&["*:admin"]);
        for role in [Role::Reader, Role::Writer, Role::Approver, Role::Admin] {
            assert!(admin.may(role, "anything") && admin.may_everywhere(role));
        }
        assert!(!w.may_everywhere(Role::Reader) && w.may_somewhere(Role::Reader));
        assert!(!principal(&[]).may_somewhere(Role::Reader));
    }
}
