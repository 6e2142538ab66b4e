//! The simulated cluster's state: what each kubectl command does to it,
//! and the promises it checks.

use super::*;

impl Model {
    pub(super) fn healthy(&self) -> bool {
        self.db_recovering == 0 && self.drained_db.is_none() && self.primary.is_some()
    }

    pub(super) fn uid(&mut self) -> u64 {
        self.next_uid += 1;
        self.next_uid
    }

    pub(super) fn ip(p: &FakePod) -> String {
        format!("10.244.{}.{}", p.uid / 250, p.uid % 250 + 2)
    }

    pub(super) fn pod_json(p: &FakePod) -> Value {
        json!({
            "metadata": {
                "name": p.name,
                "uid": p.uid.to_string(),
                "deletionTimestamp": if p.terminating { json!("2026-11-30T00:00:00Z") } else { Value::Null },
            },
            "spec": {"nodeName": p.node},
            "status": {"conditions": [{"type": "Ready", "status": if p.warming == 0 && !p.terminating { "True" } else { "False" }}]},
        })
    }

    pub(super) fn read_vfps(&mut self) -> Value {
        self.tick();
        let cut = self
            .replica_cut
            .clone()
            .filter(|(_, reads)| *reads == 0)
            .map(|(name, _)| name);
        let items: Vec<Value> = self
            .vfps
            .iter()
            .map(|p| {
                let mut j = Self::pod_json(p);
                // A replica cut off from its database reports not ready.
                if cut.as_deref() == Some(p.name.as_str()) {
                    j["status"]["conditions"][0]["status"] = json!("False");
                }
                j
            })
            .collect();
        json!({ "items": items })
    }

    /// The standbys: every instance but the primary and a killed one.
    pub(super) fn read_standbys(&self) -> Value {
        let items: Vec<Value> = self
            .db
            .iter()
            .filter(|p| Some(&p.name) != self.primary.as_ref())
            .filter(|p| self.standby_chaos.as_ref() != Some(&p.name) || self.db_recovering == 0)
            .map(Self::pod_json)
            .collect();
        json!({ "items": items })
    }

    /// What the primary's pg_stat_replication lists as streaming and quorum.
    pub(super) fn quorum_standbys(&self) -> Vec<String> {
        if self.isolation == Some(0) {
            return Vec::new();
        }
        let mut names: Vec<String> = self
            .db
            .iter()
            .map(|p| p.name.clone())
            .filter(|n| Some(n) != self.primary.as_ref())
            .filter(|n| self.standby_chaos.as_ref() != Some(n) || self.db_recovering == 0)
            .filter(|n| !self.not_streaming.contains(n))
            .collect();
        names.sort();
        names
    }

    pub(super) fn pod(&self, name: &str) -> Option<&FakePod> {
        self.vfps.iter().chain(&self.db).find(|p| p.name == name)
    }

    /// `kubectl exec` into a database pod: the TCP probe or psql.
    pub(super) fn exec(&mut self, pod: &str, command: &[&str]) -> anyhow::Result<String> {
        let Some(from) = self.pod(pod).cloned() else {
            anyhow::bail!("pods {pod:?} not found");
        };
        let primary = self.primary.clone().unwrap_or_default();
        let isolated = self.isolation == Some(0);
        if command.first() == Some(&"psql") {
            if command.iter().any(|c| c.contains("csv_jobs")) {
                if !command.windows(2).any(|w| w == ["-d", "vfps"]) {
                    anyhow::bail!("ERROR:  relation \"csv_jobs\" does not exist");
                }
                if from.name != primary {
                    // A standby that has not replayed the latest takeover.
                    return Ok(String::new());
                }
                return Ok(self.csv_jobs.iter().map(|l| format!("{l}\n")).collect());
            }
            if command.iter().any(|c| c.contains("pg_stat_replication")) {
                if from.name != primary {
                    // A standby's pg_stat_replication is empty.
                    return Ok(String::new());
                }
                return Ok(self.quorum_standbys().join("\n"));
            }
            if from.name == primary {
                self.wal += 100;
                return Ok(format!("f|{}\n", self.wal));
            }
            if !isolated {
                self.standby_wal = self.wal;
            }
            return Ok(format!("t|{}\n", self.standby_wal));
        }
        let script = command.last().copied().unwrap_or_default();
        let target = self
            .vfps
            .iter()
            .chain(&self.db)
            .find(|p| script.contains(&format!("/dev/tcp/{}/", Self::ip(p))))
            .cloned();
        let Some(target) = target else {
            return Ok("exit 1\n".into());
        };
        let between_instances = self.db.iter().any(|d| d.name == target.name);
        let cut = if between_instances {
            isolated && (from.name == primary || target.name == primary)
        } else {
            self.partition == Some(0)
                || self
                    .replica_cut
                    .as_ref()
                    .is_some_and(|(r, reads)| *reads == 0 && *r == target.name)
        };
        Ok(if cut { "exit 124\n" } else { "connected\n" }.into())
    }

    /// A one-shot gray fault's status: injected after a few reads.
    pub(super) fn injected(reads: &mut Option<u32>) -> anyhow::Result<Value> {
        let Some(r) = reads.as_mut() else {
            anyhow::bail!("NotFound");
        };
        let injected = if *r == 0 { "True" } else { "False" };
        *r = r.saturating_sub(1);
        Ok(json!({"status": {"conditions": [{"type": "AllInjected", "status": injected}]}}))
    }

    /// Time passes with every read of the workload: terminating pods go, new pods
    /// warm up, and the pod-kill schedule kills one pod every twentieth read.
    pub(super) fn tick(&mut self) {
        self.pod_list_reads += 1;
        let gone: Vec<FakePod> = self
            .vfps
            .iter()
            .filter(|p| p.terminating)
            .cloned()
            .collect();
        self.vfps.retain(|p| !p.terminating);
        for g in gone {
            let uid = self.uid();
            let node = if self.cordoned.contains(&g.node) {
                NODES
                    .iter()
                    .find(|n| !self.cordoned.iter().any(|c| c == *n))
                    .unwrap()
                    .to_string()
            } else {
                g.node
            };
            self.vfps.push(FakePod {
                name: format!("vfps-r{uid}"),
                uid,
                node,
                warming: 2,
                terminating: false,
            });
        }
        for p in &mut self.vfps {
            p.warming = p.warming.saturating_sub(1);
        }
        // Like a schedule with an interval well above the time to heal.
        if self.pod_kill_schedule && self.pod_list_reads >= self.last_kill_read + 20 {
            self.last_kill_read = self.pod_list_reads;
            let i = (self.pod_list_reads / 20) as usize % self.vfps.len();
            self.vfps[i].terminating = true;
        }
    }

    pub(super) fn read_cluster(&mut self) -> Value {
        let primary = self.primary.clone().unwrap_or_default();
        if self.bootstrapping > 0 {
            self.bootstrapping -= 1;
            return json!({"spec": {"instances": 3}, "status": {"instances": 1, "readyInstances": 1,
                "phase": "Creating a new replica", "currentPrimary": primary, "targetPrimary": primary, "timelineID": 1}});
        }
        if self.db_recovering > 0 {
            self.db_recovering -= 1;
        }
        let (ready, phase) = if self.healthy() {
            (3, cluster::PHASE_HEALTHY)
        } else {
            (2, "Waiting for the instances to become active")
        };
        json!({"spec": {"instances": 3}, "status": {"instances": 3, "readyInstances": ready, "phase": phase,
            "currentPrimary": primary, "targetPrimary": primary, "timelineID": self.timeline}})
    }

    pub(super) fn deployment(&mut self) -> Value {
        self.tick();
        let ready = self
            .vfps
            .iter()
            .filter(|p| p.warming == 0 && !p.terminating)
            .count();
        let live = self.vfps.iter().filter(|p| !p.terminating).count();
        json!({"spec": {"replicas": 3}, "status": {"replicas": live, "readyReplicas": ready, "updatedReplicas": live}})
    }

    pub(super) fn db_fault(&mut self, what: &str) {
        if !self.healthy() && !self.second_kill_expected {
            self.violations
                .push(format!("{what} applied while the database was not healthy"));
        }
        if (self.primary_chaos && !self.second_kill_expected)
            || self.partition.is_some()
            || self.delay.is_some()
            || self.standby_chaos.is_some()
            || self.replica_cut.is_some()
        {
            self.violations.push(format!(
                "{what} applied while another database fault was active"
            ));
        }
    }

    pub(super) fn apply(&mut self, manifests: &str) -> anyhow::Result<()> {
        for doc in manifests.split("\n---") {
            self.apply_one(doc)?;
        }
        Ok(())
    }

    pub(super) fn apply_one(&mut self, manifest: &str) -> anyhow::Result<()> {
        if manifest.contains("${") {
            anyhow::bail!("unrendered placeholder in {manifest}");
        }
        let kind = field(manifest, "kind:");
        let name = field(manifest, "  name:");
        match kind.as_str() {
            "Schedule" if manifest.contains("vfps-pod-kill") => {
                if !manifest.contains("@every") {
                    anyhow::bail!("schedule without an interval");
                }
                self.pod_kill_schedule = true;
            }
            "PodChaos" if name == "db-standby-kill" => {
                self.db_fault("a standby kill");
                let victim = named_pod(manifest);
                if Some(&victim) == self.primary.as_ref() || self.pod(&victim).is_none() {
                    self.violations.push(format!(
                        "the standby kill selects {victim:?}, not a standby"
                    ));
                }
                self.standby_chaos = Some(victim);
                self.db_recovering = 3;
            }
            "PodChaos" if name == "vfps-runner-kill" => {
                let victim = named_pod(manifest);
                self.runner_kill = true;
                if self.runner_kill_inert {
                    return Ok(());
                }
                match self.vfps.iter_mut().find(|p| p.name == victim) {
                    Some(p) => p.terminating = true,
                    None => self.violations.push(format!(
                        "the runner kill selects {victim:?}, not a vfps pod"
                    )),
                }
                if let Some(jobs) = self.csv_jobs_after_kill.take() {
                    self.csv_jobs = jobs;
                }
            }
            "PodChaos" => {
                // The primary of an isolation is killed while it is cut off.
                let isolated = self.isolation.take();
                self.db_fault("a primary kill");
                self.isolation = isolated;
                self.primary_chaos = true;
                // The primary dies; a standby is promoted; the operator re-creates
                // the killed pod, which rejoins after a few status reads.
                let old = self.primary.take().unwrap();
                let uid = self.uid();
                let pod = self.db.iter_mut().find(|p| p.name == old).unwrap();
                pod.uid = uid;
                self.primary = self.db.iter().map(|p| p.name.clone()).find(|n| *n != old);
                self.db_recovering = 3;
                self.timeline += 1;
            }
            "NetworkChaos" if name == "db-primary-isolation" => {
                self.db_fault("an isolation");
                if !manifest.contains("direction: both") {
                    self.violations
                        .push("the isolation is not both ways".into());
                }
                self.isolation = Some(2);
            }
            "NetworkChaos" if name == "vfps-partition" => {
                let replica = named_pod(manifest);
                self.replica_cut = Some((replica, 2));
            }
            "NetworkChaos" if name == "db-network-delay" => {
                self.db_fault("a delay");
                if !manifest.contains("latency: 200ms") || !manifest.contains("jitter: 50ms") {
                    self.violations
                        .push("the delay is not 200 ms ± 50 ms".into());
                }
                self.delay = Some(2);
                self.delay_on_round_trip = match field(manifest, "  direction:").as_str() {
                    "from" | "both" => Duration::from_millis(200),
                    _ => Duration::ZERO,
                };
            }
            "NetworkChaos" => {
                self.db_fault("a partition");
                if !manifest.contains("action: partition") || !manifest.contains("direction: to") {
                    self.violations
                        .push("the partition is not the asset's".into());
                }
                self.partition = Some(2);
            }
            "Namespace" | "Cluster" => {}
            "Secret" if name == "vfps-chaos-tokens" => {
                let keys = ["load.token:", "expired.token:", "read-only.token:"];
                if !keys
                    .iter()
                    .all(|k| manifest.contains(&format!("  {k} vfps_sat_")))
                {
                    anyhow::bail!("the tokens Secret lacks a token: {manifest}");
                }
                self.tokens_secret = true;
            }
            "Job" => {
                if manifest.contains("${") {
                    anyhow::bail!("unrendered placeholder in the Job");
                }
                self.job = Some(manifest.to_owned());
            }
            other => anyhow::bail!("unexpected manifest kind {other:?}"),
        }
        Ok(())
    }

    pub(super) fn delete(&mut self, manifest: &str) {
        let name = field(manifest, "  name:");
        match field(manifest, "kind:").as_str() {
            "Schedule" if manifest.contains("vfps-pod-kill") => self.pod_kill_schedule = false,
            "PodChaos" if name == "db-standby-kill" => self.standby_chaos = None,
            "PodChaos" if name == "vfps-runner-kill" => self.runner_kill = false,
            "PodChaos" => self.primary_chaos = false,
            "NetworkChaos" if name == "db-primary-isolation" => self.isolation = None,
            "NetworkChaos" if name == "vfps-partition" => self.replica_cut = None,
            "NetworkChaos" if name == "db-network-delay" => self.delay = None,
            "NetworkChaos" | "Schedule" => self.partition = None,
            _ => {}
        }
    }

    pub(super) fn drain(&mut self, node: &str) -> anyhow::Result<String> {
        if !self.healthy() {
            self.violations
                .push("drained while the database was not healthy".into());
        }
        if self.vfps.iter().any(|p| p.warming > 0 || p.terminating) {
            self.violations
                .push("drained while a vfps replica was not ready".into());
        }
        self.cordoned.push(node.to_owned());
        if self.drain_times_out {
            anyhow::bail!("error: timed out waiting for the condition");
        }
        let db = self
            .db
            .iter()
            .find(|p| p.node == node)
            .unwrap()
            .name
            .clone();
        if self.primary.as_deref() == Some(db.as_str()) {
            self.violations
                .push(format!("drained {node}, the primary's node"));
        }
        self.drained_db = Some(db);
        for p in self.vfps.iter_mut().filter(|p| p.node == node) {
            p.terminating = true;
        }
        Ok(format!("node/{node} drained"))
    }

    pub(super) fn uncordon(&mut self, node: &str) {
        self.cordoned.retain(|n| n != node);
        if self.drained_db.take().is_some() {
            self.db_recovering = 2;
        }
    }

    pub(super) fn rollout_restart(&mut self) {
        for p in &mut self.vfps {
            p.terminating = true;
        }
    }

    /// Saving and loading images, as Docker's containerd image store and
    /// kind v0.27.0 do it: kind imports with `ctr images import
    /// --all-platforms`, which fails on an archive of a whole multi-arch index
    /// whose other platforms were never pulled.
    pub(super) fn docker_and_kind_images(
        &mut self,
        program: &str,
        args: &[&str],
    ) -> Option<anyhow::Result<String>> {
        let missing_blob = || {
            Err(anyhow::anyhow!(
                "ERROR: failed to load image: command \"docker exec --privileged -i vfps-ha-control-plane \
                 ctr --namespace=k8s.io images import --all-platforms --digests --snapshotter=overlayfs -\" \
                 failed with error: exit status 1\nCommand Output: ctr: content digest sha256:9106d839: not found"
            ))
        };
        match (program, args) {
            ("docker", ["image", "inspect", "--format", _, _]) => Some(Ok("linux/amd64\n".into())),
            ("docker", ["image", "save", rest @ ..]) => {
                let path = rest.iter().skip_while(|a| **a != "-o").nth(1)?;
                let one_platform = rest.contains(&"--platform");
                self.archives.insert((*path).to_owned(), one_platform);
                Some(Ok(String::new()))
            }
            ("kind", ["load", "docker-image", ..]) => Some(missing_blob()),
            ("kind", ["load", "image-archive", "--name", _, path]) => {
                Some(match self.archives.get(*path) {
                    Some(true) => Ok(String::new()),
                    Some(false) => missing_blob(),
                    None => Err(anyhow::anyhow!(
                        "ERROR: stat {path}: no such file or directory"
                    )),
                })
            }
            _ => None,
        }
    }

    pub(super) fn job_log(&self) -> String {
        if self.job.is_none() {
            return String::new();
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        format!(
            "Init\n----LOAD WINDOW START unix={:.3}----\nprogress\n",
            now - 0.5
        )
    }
}
