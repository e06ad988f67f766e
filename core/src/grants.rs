//! Per-queue grants: which queues a role may use, and for what.
//!
//! A role that holds no grant (directly or through the roles it is a member
//! of) is unrestricted: the EXECUTE rights of the aedb_queue roles alone
//! decide what it may call. Once it holds any grant, every call is checked:
//! the queue must match a grant whose privilege allows the action.

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
                format!("must be one of producer, worker, admin; got {value:?}"),
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

/// Whether a caller holding `grants` may do `action` on every queue `target`
/// matches (for a single queue, an exact pattern).
pub fn allowed(grants: &[Grant], action: Action, target: &Pattern) -> bool {
    grants.is_empty()
        || grants
            .iter()
            .any(|g| g.privilege.allows(action) && g.pattern.covers(target))
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

    #[test]
    fn a_role_without_grants_is_unrestricted_and_one_with_grants_is_confined() {
        let queue = |q: &str| Pattern::Exact(q.into());
        assert!(allowed(&[], Action::Administer, &queue("any")));
        let tenant = [
            grant("a.*", Privilege::Worker),
            grant("a.in", Privilege::Producer),
        ];
        assert!(allowed(&tenant, Action::Work, &queue("a.jobs")));
        assert!(!allowed(&tenant, Action::Work, &queue("b.jobs")));
        assert!(!allowed(&tenant, Action::Read, &queue("b.jobs")));
        assert!(allowed(&tenant, Action::Enqueue, &queue("a.in")));
        assert!(!allowed(&tenant, Action::Enqueue, &queue("a.jobs")));
        assert!(!allowed(&tenant, Action::Administer, &queue("a.jobs")));
        let admin = [grant("a.*", Privilege::Admin)];
        assert!(allowed(&admin, Action::Administer, &pattern("a.x.*")));
        assert!(!allowed(&admin, Action::Administer, &pattern("*")));
    }
}
