//! Per-queue grants: which queues a role may use, and for what.
//!
//! Confinement is an explicit state of a role, set and lifted only by an
//! unconfined admin (`queue_confine`, `queue_unconfine`; a first grant by an
//! unconfined admin confines too). A role is confined when it, or any role
//! it is a member of through any chain, is confined; it may then use only
//! what the grants of those confined roles allow, and with no grant nothing.
//! Revoking a grant never unconfines. An unconfined role is limited only by
//! the EXECUTE rights of the aedb_queue roles. A session is checked as
//! every identity it has (current role, the role SET ROLE chose, the login
//! role), so switching roles cannot shed confinement (docs/security.md).

use crate::error::quoted;
use crate::validate;
use crate::QueueError;

/// What a grant gives; named like the roles the extension creates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Privilege {
    Producer,
    Worker,
    Admin,
}

/// What a call needs on its queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// queue_enqueue, queue_enqueue_batch, follow-ups of a completion.
    Enqueue,
    /// queue_claim and the fenced settlements.
    Work,
    /// queue_get, queue_list and the views.
    Read,
    /// cancel, purge, retry_dead, configure, pause, resume, reap, grant.
    Administer,
}

impl Privilege {
    pub fn parse(arg: &str, value: &str) -> Result<Privilege, QueueError> {
        match value {
            "producer" => Ok(Privilege::Producer),
            "worker" => Ok(Privilege::Worker),
            "admin" => Ok(Privilege::Admin),
            _ => Err(QueueError::invalid(
                arg,
                format!(
                    "must be one of producer, worker, admin; got {}",
                    quoted(value)
                ),
            )),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Privilege::Producer => "producer",
            Privilege::Worker => "worker",
            Privilege::Admin => "admin",
        }
    }

    pub fn allows(self, action: Action) -> bool {
        match self {
            Privilege::Admin => true,
            Privilege::Worker => matches!(action, Action::Work | Action::Read),
            Privilege::Producer => action == Action::Enqueue,
        }
    }
}

impl Action {
    pub fn verb(self) -> &'static str {
        match self {
            Action::Enqueue => "enqueue",
            Action::Work => "work",
            Action::Read => "read",
            Action::Administer => "administer",
        }
    }
}

/// A queue pattern: an exact queue name, or a name prefix followed by `*`
/// (`*` alone matches every queue). A name that really ends in `*` is
/// written with `\*`. Nothing else is special: `_`, `%` and quotes are
/// plain characters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pattern {
    Exact(String),
    Prefix(String),
}

impl Pattern {
    pub fn parse(arg: &str, value: &str) -> Result<Pattern, QueueError> {
        validate::name(arg, value)?;
        Ok(if let Some(name) = value.strip_suffix("\\*") {
            Pattern::Exact(format!("{name}*"))
        } else if let Some(prefix) = value.strip_suffix('*') {
            Pattern::Prefix(prefix.to_string())
        } else {
            Pattern::Exact(value.to_string())
        })
    }

    pub fn matches(&self, queue: &str) -> bool {
        match self {
            Pattern::Exact(name) => queue == name,
            Pattern::Prefix(prefix) => queue.starts_with(prefix.as_str()),
        }
    }

    /// Whether every queue `other` matches is matched by `self`.
    pub fn covers(&self, other: &Pattern) -> bool {
        match (self, other) {
            (_, Pattern::Exact(name)) => self.matches(name),
            (Pattern::Prefix(outer), Pattern::Prefix(inner)) => inner.starts_with(outer.as_str()),
            (Pattern::Exact(_), Pattern::Prefix(_)) => false,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub pattern: Pattern,
    pub privilege: Privilege,
}

/// What one identity of a session may do on queues.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rights {
    /// Superusers, and roles outside every confined role.
    Unconfined,
    /// The grants of every confined role the identity belongs to.
    Confined(Vec<Grant>),
}

impl Rights {
    /// Whether `action` is allowed on every queue `target` matches (for a
    /// single queue, an exact pattern).
    pub fn allows(&self, action: Action, target: &Pattern) -> bool {
        match self {
            Rights::Unconfined => true,
            Rights::Confined(grants) => grants
                .iter()
                .any(|g| g.privilege.allows(action) && g.pattern.covers(target)),
        }
    }

    pub fn is_confined(&self) -> bool {
        matches!(self, Rights::Confined(_))
    }

    /// Whether an admin with these rights may change the grants of a role
    /// whose own rights are `target`, giving or taking `pattern`: an
    /// unconfined admin may change any role's; a confined one only those
    /// of a confined role all of whose grants, and the pattern, lie within
    /// the queues it administers. So a confined admin can neither reach
    /// outside its patterns nor confine (lock out) a role that was free.
    pub fn may_change_grants_of(&self, target: &Rights, pattern: &Pattern) -> bool {
        match (self, target) {
            (Rights::Unconfined, _) => true,
            (Rights::Confined(_), Rights::Unconfined) => false,
            (Rights::Confined(_), Rights::Confined(held)) => {
                self.allows(Action::Administer, pattern)
                    && held
                        .iter()
                        .all(|g| self.allows(Action::Administer, &g.pattern))
            }
        }
    }
}

/// Whether every identity of a session allows `action` on `target`.
pub fn all_allow(identities: &[Rights], action: Action, target: &Pattern) -> bool {
    identities.iter().all(|r| r.allows(action, target))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(s: &str) -> Pattern {
        Pattern::parse("queue_pattern", s).unwrap()
    }

    fn grant(p: &str, privilege: Privilege) -> Grant {
        Grant {
            pattern: pattern(p),
            privilege,
        }
    }

    #[test]
    fn patterns_are_exact_names_or_prefixes() {
        assert!(pattern("emails").matches("emails"));
        assert!(!pattern("emails").matches("emails2"));
        assert!(pattern("tenant_a.*").matches("tenant_a.emails"));
        assert!(!pattern("tenant_a.*").matches("tenant_b.emails"));
        assert!(pattern("*").matches("anything"));
        // `_` and `%` are not wildcards.
        assert!(!pattern("tenant_a").matches("tenantXa"));
        assert!(!pattern("a%").matches("abc"));
    }

    #[test]
    fn an_escaped_star_is_a_literal_name() {
        assert_eq!(pattern("odd\\*"), Pattern::Exact("odd*".into()));
        assert!(pattern("odd\\*").matches("odd*"));
        assert!(!pattern("odd\\*").matches("odd-one"));
    }

    #[test]
    fn bad_patterns_are_rejected_naming_the_argument() {
        let err = Pattern::parse("queue_pattern", "").unwrap_err();
        assert_eq!(err.sqlstate(), "22023");
        assert!(err.to_string().contains("queue_pattern"));
        assert!(Pattern::parse("queue_pattern", &"x".repeat(129)).is_err());
    }

    #[test]
    fn covers_compares_pattern_sets() {
        assert!(pattern("a.*").covers(&pattern("a.b.*")));
        assert!(pattern("a.*").covers(&pattern("a.x")));
        assert!(!pattern("a.b.*").covers(&pattern("a.*")));
        assert!(!pattern("a.x").covers(&pattern("a.*")));
        assert!(pattern("*").covers(&pattern("*")));
    }

    #[test]
    fn privileges_allow_their_actions_only() {
        use Action::*;
        assert!(Privilege::Producer.allows(Enqueue));
        assert!(!Privilege::Producer.allows(Work) && !Privilege::Producer.allows(Read));
        assert!(Privilege::Worker.allows(Work) && Privilege::Worker.allows(Read));
        assert!(!Privilege::Worker.allows(Enqueue) && !Privilege::Worker.allows(Administer));
        assert!([Enqueue, Work, Read, Administer]
            .iter()
            .all(|a| Privilege::Admin.allows(*a)));
        assert!(Privilege::parse("privilege", "owner").is_err());
    }

    fn queue(q: &str) -> Pattern {
        Pattern::Exact(q.into())
    }

    fn confined(grants: &[(&str, Privilege)]) -> Rights {
        Rights::Confined(grants.iter().map(|(p, v)| grant(p, *v)).collect())
    }

    #[test]
    fn unconfined_is_unrestricted_and_confined_is_limited_to_its_grants() {
        assert!(Rights::Unconfined.allows(Action::Administer, &queue("any")));
        let tenant = confined(&[("a.*", Privilege::Worker), ("a.in", Privilege::Producer)]);
        assert!(tenant.allows(Action::Work, &queue("a.jobs")));
        assert!(!tenant.allows(Action::Work, &queue("b.jobs")));
        assert!(!tenant.allows(Action::Read, &queue("b.jobs")));
        assert!(tenant.allows(Action::Enqueue, &queue("a.in")));
        assert!(!tenant.allows(Action::Enqueue, &queue("a.jobs")));
        assert!(!tenant.allows(Action::Administer, &queue("a.jobs")));
        let admin = confined(&[("a.*", Privilege::Admin)]);
        assert!(admin.allows(Action::Administer, &pattern("a.x.*")));
        assert!(!admin.allows(Action::Administer, &pattern("*")));
    }

    #[test]
    fn confined_without_grants_may_do_nothing() {
        let none = Rights::Confined(Vec::new());
        for action in [
            Action::Enqueue,
            Action::Work,
            Action::Read,
            Action::Administer,
        ] {
            assert!(!none.allows(action, &queue("a.jobs")));
        }
        assert!(none.is_confined() && !Rights::Unconfined.is_confined());
    }

    #[test]
    fn every_identity_of_a_session_must_allow() {
        let tenant = confined(&[("a.*", Privilege::Worker)]);
        // SET ROLE to an unconfined group role keeps the login's confinement.
        let session = [Rights::Unconfined, tenant.clone()];
        assert!(all_allow(&session, Action::Work, &queue("a.jobs")));
        assert!(!all_allow(&session, Action::Work, &queue("b.jobs")));
        assert!(all_allow(
            &[Rights::Unconfined],
            Action::Work,
            &queue("b.jobs")
        ));
    }

    #[test]
    fn a_confined_admin_changes_only_roles_confined_within_its_patterns() {
        let admin = confined(&[("a.*", Privilege::Admin)]);
        let inside = confined(&[("a.x", Privilege::Worker)]);
        let straddling = confined(&[("a.x", Privilege::Worker), ("b.*", Privilege::Worker)]);
        let empty = Rights::Confined(Vec::new());
        assert!(admin.may_change_grants_of(&inside, &pattern("a.y")));
        assert!(admin.may_change_grants_of(&empty, &pattern("a.*")));
        assert!(!admin.may_change_grants_of(&inside, &pattern("b.y")));
        assert!(!admin.may_change_grants_of(&straddling, &pattern("a.y")));
        // An unconfined role would be confined (locked out) by a grant.
        assert!(!admin.may_change_grants_of(&Rights::Unconfined, &pattern("a.x")));
        assert!(Rights::Unconfined.may_change_grants_of(&Rights::Unconfined, &pattern("*")));
        let worker = confined(&[("a.*", Privilege::Worker)]);
        assert!(!worker.may_change_grants_of(&inside, &pattern("a.x")));
    }
}
