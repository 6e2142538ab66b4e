//! What `vfps-chaos local up` made and how to reach it, on stdout at its end
//! (as `kind create cluster` or `minikube start` end theirs).

use std::fmt::Write as _;

use super::{app_ip, connection_string, front, tokens_dir, Options, ZONES};
use crate::platform::access;

/// The lines `up` prints once the topology is at steady state.
pub fn summary(opts: &Options) -> String {
    let mut s = String::from(
        "The local vfps topology is up.\n\nReplicas (one a zone; reachable from this host):\n",
    );
    for z in ZONES {
        let ip = app_ip(z);
        let _ = writeln!(
            s,
            "  vfps-app-{z}  REST/FHIR http://{ip}:8080  gRPC {ip}:8081  metrics http://{ip}:8082/metrics"
        );
    }
    if opts.ui {
        let _ = writeln!(
            s,
            "\nLoad balancer (every replica, checked on /readyz): {ingress}\n\
             Admin UI: {ingress}/ui (identity provider {idp}: sign in as `admin` or `reader`, no password)",
            ingress = front::ingress_url(),
            idp = front::issuer(),
        );
    } else {
        s.push_str("\nNo load balancer or UI (--ui false).\n");
    }
    let tokens = tokens_dir(&opts.base);
    let _ = writeln!(
        s,
        "\nAccess tokens (root only): {load} (admin; read, write, reverse-lookup, erase everywhere), \
         {read} (read), {expired} (expired)\n  \
         curl -H \"Authorization: Bearer $(cat {load})\" http://{ip}:8080/v1/namespaces",
        load = tokens.join(access::LOAD.file).display(),
        read = tokens.join(access::READ_ONLY.file).display(),
        expired = tokens.join(access::EXPIRED.file).display(),
        ip = app_ip(ZONES[0]),
    );
    let _ = writeln!(
        s,
        "\nDatabase (Patroni, 3 members; for `vfps tokens …` and `vfps restore status|confirm`):\n  \
         export ConnectionStrings__PostgreSQL='{}'",
        connection_string()
    );
    let base = opts.base.display();
    let base_flag = if opts.base == std::path::Path::new(super::DEFAULT_BASE) {
        String::new()
    } else {
        format!(" --base {base}")
    };
    let _ = writeln!(
        s,
        "\nState and logs: {base}\nRun the scenarios: vfps-chaos local scenarios{base_flag}\n\
         Tear it down:      vfps-chaos local down{base_flag}"
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(ui: bool, base: &str) -> Options {
        Options {
            base: base.into(),
            vfps_bin: "vfps".into(),
            restart_backoff: std::time::Duration::from_secs(1),
            grace_period: std::time::Duration::from_secs(1),
            profile: super::super::DatabaseProfile::Safe,
            ui,
            ui_tests_dir: Default::default(),
            backup: None,
            sealed: true,
        }
    }

    #[test]
    fn the_summary_names_every_address_the_tokens_the_database_and_the_way_down() {
        let s = summary(&options(true, "/srv/chaos"));
        for z in ZONES {
            let ip = app_ip(z);
            assert!(s.contains(&format!("http://{ip}:8080")), "{s}");
            assert!(s.contains(&format!("gRPC {ip}:8081")), "{s}");
            assert!(s.contains(&format!("http://{ip}:8082/metrics")), "{s}");
        }
        assert!(s.contains(&format!("{}/ui", front::ingress_url())), "{s}");
        assert!(s.contains("/srv/chaos/tokens/load.token"), "{s}");
        assert!(s.contains(&connection_string()), "{s}");
        assert!(s.contains("vfps-chaos local down --base /srv/chaos"), "{s}");
    }

    #[test]
    fn without_the_ui_the_summary_says_so_and_the_default_base_needs_no_flag() {
        let s = summary(&options(false, super::super::DEFAULT_BASE));
        assert!(s.contains("No load balancer or UI"), "{s}");
        assert!(!s.contains("/ui"), "{s}");
        assert!(s.contains("vfps-chaos local down\n"), "{s}");
    }
}
