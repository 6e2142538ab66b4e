//! Roles → permissions, by upstream's rules: admin roles may manage namespaces
//! (and here, access tokens); each namespace rule (a name or `*`) lists the
//! roles that may read, write and reverse-look-up in it. A database token
//! carries its own admin flag and grants instead of roles.

use vfps_core::{
    access::{Grant, Permission},
    Error,
};

use super::{Access, Need, Operation, Principal};
use crate::config::{Authorization, NamespaceRule};

pub struct Rules {
    admin_roles: Vec<String>,
    namespace_rules: Vec<NamespaceRule>,
}

impl Rules {
    pub fn new(config: &Authorization) -> Self {
        Self {
            admin_roles: config.admin_roles.clone(),
            namespace_rules: config.namespace_rules.clone(),
        }
    }

    fn roles_allow(&self, roles: &[String], permission: Permission, namespace: &str) -> bool {
        self.namespace_rules
            .iter()
            .filter(|r| r.namespace == "*" || r.namespace == namespace)
            .any(|r| {
                let allowed = match permission {
                    Permission::Read => &r.read_roles,
                    Permission::Write => &r.write_roles,
                    Permission::ReverseLookup => &r.reverse_lookup_roles,
                    Permission::Erase => &r.erase_roles,
                };
                allowed.iter().any(|a| roles.contains(a))
            })
    }

    fn is_admin(&self, access: &Access) -> bool {
        match access {
            Access::Everything => true,
            Access::Roles(roles) => self.admin_roles.iter().any(|a| roles.contains(a)),
            Access::Grants { admin, .. } => *admin,
        }
    }

    fn allows(&self, access: &Access, permission: Permission, namespace: &str) -> bool {
        match access {
            Access::Everything => true,
            Access::Roles(roles) => self.roles_allow(roles, permission, namespace),
            Access::Grants { grants, .. } => grants.iter().any(|g| g.allows(permission, namespace)),
        }
    }

    /// Whether `access` has `permission` wherever `pattern` reaches: in the
    /// namespace it names, or (`*`) in every namespace, present and future.
    fn holds(&self, access: &Access, permission: Permission, pattern: &str) -> bool {
        if pattern != "*" {
            return self.allows(access, permission, pattern);
        }
        match access {
            Access::Everything => true,
            Access::Roles(roles) => self.namespace_rules.iter().any(|r| {
                r.namespace == "*"
                    && match permission {
                        Permission::Read => &r.read_roles,
                        Permission::Write => &r.write_roles,
                        Permission::ReverseLookup => &r.reverse_lookup_roles,
                        Permission::Erase => &r.erase_roles,
                    }
                    .iter()
                    .any(|a| roles.contains(a))
            }),
            Access::Grants { grants, .. } => grants
                .iter()
                .any(|g| g.namespace == "*" && g.permissions.contains(&permission)),
        }
    }

    /// `PERMISSION_DENIED` naming the first of `grants` (or the admin right)
    /// that `principal` does not hold itself.
    pub fn may_grant(
        &self,
        principal: &Principal,
        admin: bool,
        grants: &[Grant],
    ) -> Result<(), Error> {
        let access = &principal.access;
        if admin && !self.is_admin(access) {
            return Err(Error::permission_denied(
                "cannot grant the admin right: the caller is not an admin",
            ));
        }
        for grant in grants {
            if let Some(missing) = grant
                .permissions
                .iter()
                .find(|p| !self.holds(access, **p, &grant.namespace))
            {
                let scope = if grant.namespace == "*" {
                    "every namespace (*)".to_owned()
                } else {
                    format!("namespace {}", grant.namespace)
                };
                return Err(Error::permission_denied(format!(
                    "cannot grant {grant}: the caller does not hold the {} permission in {scope} itself",
                    missing.name()
                )));
            }
        }
        Ok(())
    }

    /// `PERMISSION_DENIED` naming the operation and what it needs, unless allowed.
    pub fn authorize(
        &self,
        principal: &Principal,
        operation: Operation,
        namespace: Option<&str>,
    ) -> Result<(), Error> {
        let access = &principal.access;
        let ns = namespace.unwrap_or_default();
        // An admin manages namespaces but reads, writes and re-identifies
        // only with the namespace's own roles, as upstream.
        let (allowed, needed) = match operation.needs() {
            Need::Authenticated => (true, String::new()),
            Need::Admin => (self.is_admin(access), "an admin role".to_owned()),
            Need::Permission(p) => (
                self.allows(access, p, ns),
                format!("the {} permission in namespace {ns}", p.name()),
            ),
            Need::AnyPermission => (
                self.is_admin(access)
                    || Permission::ALL
                        .into_iter()
                        .any(|p| self.allows(access, p, ns)),
                format!("a permission in namespace {ns}"),
            ),
        };
        if allowed {
            Ok(())
        } else {
            Err(Error::permission_denied(format!(
                "{} needs {needed}",
                operation.name()
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use vfps_core::ErrorKind;

    use super::*;

    fn rules() -> Rules {
        Rules::new(&Authorization {
            admin_roles: vec!["admin".into()],
            namespace_rules: vec![
                NamespaceRule {
                    namespace: "research".into(),
                    read_roles: vec!["reader".into()],
                    write_roles: vec!["writer".into()],
                    reverse_lookup_roles: vec!["trustee".into()],
                    erase_roles: Vec::new(),
                },
                NamespaceRule {
                    namespace: "*".into(),
                    read_roles: vec!["auditor".into()],
                    ..NamespaceRule::default()
                },
            ],
            ..Authorization::default()
        })
    }

    fn with_roles(roles: &[&str]) -> Principal {
        Principal {
            subject: "s".into(),
            token_id: None,
            access: Access::Roles(roles.iter().map(|r| r.to_string()).collect()),
            valid_until: None,
        }
    }

    fn verdict(p: &Principal, op: Operation, ns: &str) -> Result<(), ErrorKind> {
        rules().authorize(p, op, Some(ns)).map_err(|e| e.kind)
    }

    #[test]
    fn each_role_is_allowed_exactly_its_operations() {
        use Operation::*;
        let denied = Err(ErrorKind::PermissionDenied);
        let table: &[(&str, Operation, &str, Result<(), ErrorKind>)] = &[
            ("admin", CreateNamespace, "research", Ok(())),
            ("admin", DeleteNamespace, "research", Ok(())),
            ("admin", ManageTokens, "", Ok(())),
            ("admin", GetNamespace, "research", Ok(())),
            ("admin", GetPseudonym, "research", denied),
            ("admin", CreatePseudonym, "research", denied),
            ("writer", CreatePseudonym, "research", Ok(())),
            ("writer", CreatePseudonym, "other", denied),
            ("writer", GetPseudonym, "research", denied),
            ("writer", ListPseudonyms, "research", denied),
            ("writer", GetNamespace, "research", Ok(())),
            ("writer", GetNamespace, "other", denied),
            ("writer", DeleteNamespace, "research", denied),
            ("reader", ListPseudonyms, "research", Ok(())),
            ("reader", GetPseudonym, "research", denied),
            ("trustee", GetPseudonym, "research", Ok(())),
            ("trustee", GetPseudonym, "other", denied),
            ("auditor", ListPseudonyms, "other", Ok(())),
            ("auditor", CreatePseudonym, "other", denied),
            ("nobody", ListNamespaces, "", Ok(())),
            ("nobody", GetNamespace, "research", denied),
        ];
        for (role, op, ns, want) in table {
            assert_eq!(
                verdict(&with_roles(&[role]), *op, ns),
                *want,
                "{role} {op:?} {ns}"
            );
        }
    }

    #[test]
    fn a_database_token_is_judged_by_its_own_grants() {
        let token = |admin, grants: &[&str]| Principal {
            subject: "token:x".into(),
            token_id: Some("x".into()),
            access: Access::Grants {
                admin,
                grants: grants.iter().map(|g| Grant::parse(g).unwrap()).collect(),
            },
            valid_until: None,
        };
        let loader = token(false, &["research=write"]);
        assert_eq!(
            verdict(&loader, Operation::CreatePseudonym, "research"),
            Ok(())
        );
        assert_eq!(
            verdict(&loader, Operation::GetPseudonym, "research"),
            Err(ErrorKind::PermissionDenied)
        );
        assert_eq!(
            verdict(&loader, Operation::CreateNamespace, "research"),
            Err(ErrorKind::PermissionDenied)
        );
        let admin = token(true, &[]);
        assert_eq!(verdict(&admin, Operation::ManageTokens, ""), Ok(()));
        assert_eq!(
            verdict(&admin, Operation::GetPseudonym, "research"),
            Err(ErrorKind::PermissionDenied)
        );
        let all = token(false, &["*=reverse-lookup"]);
        assert_eq!(verdict(&all, Operation::GetPseudonym, "any"), Ok(()));
    }

    /// An admin without reverse-lookup minted a token granting it to itself.
    #[test]
    fn only_rights_the_caller_holds_can_be_granted() {
        let grants =
            |raw: &[&str]| -> Vec<Grant> { raw.iter().map(|g| Grant::parse(g).unwrap()).collect() };
        let may = |p: &Principal, admin, raw: &[&str]| {
            rules()
                .may_grant(p, admin, &grants(raw))
                .map_err(|e| e.message)
        };
        let admin = with_roles(&["admin"]);
        let e = may(&admin, false, &["*=reverse-lookup,read,write"]).unwrap_err();
        assert!(
            e.contains("cannot grant *=read,write,reverse-lookup"),
            "{e}"
        );
        let e = may(&admin, false, &["research=reverse-lookup"]).unwrap_err();
        assert!(
            e.contains("reverse-lookup permission in namespace research"),
            "{e}"
        );
        assert!(may(&admin, true, &[]).is_ok());
        // Roles that hold a right pass it on, where they hold it.
        let trustee = with_roles(&["trustee", "writer"]);
        assert!(may(&trustee, false, &["research=reverse-lookup,write"]).is_ok());
        assert!(may(&trustee, false, &["other=write"]).is_err());
        assert!(may(&trustee, false, &["*=write"]).is_err());
        assert!(may(&trustee, true, &[])
            .unwrap_err()
            .contains("admin right"));
        // A rule for every namespace covers `*`; reading there is all it gives.
        let auditor = with_roles(&["auditor"]);
        assert!(may(&auditor, false, &["*=read", "any=read"]).is_ok());
        assert!(may(&auditor, false, &["*=write"]).is_err());
        // A token passes on its own grants, no more.
        let token = Principal {
            subject: "token:x".into(),
            token_id: Some("x".into()),
            access: Access::Grants {
                admin: true,
                grants: grants(&["research=read", "*=write"]),
            },
            valid_until: None,
        };
        assert!(may(&token, true, &["research=read,write", "*=write"]).is_ok());
        assert!(may(&token, false, &["*=read"]).is_err());
        assert!(may(&token, false, &["research=reverse-lookup"]).is_err());
    }
}
