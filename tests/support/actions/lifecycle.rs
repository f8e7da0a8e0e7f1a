//! A run's life: its jobs admitted (needs, `if:`, concurrency groups),
//! started, ended, cancelled, and the run concluded, told to the fake as
//! check runs, check suites and `workflow_run` deliveries.

use serde_json::Value;

use super::expr::{self, Status};
use super::step::Annotation;
use super::{Holder, JobRun, JobState, RunStatus, Runner, workflow};
use crate::support::fake_github::WorkflowRunFacts;

impl Runner<'_> {
    pub(super) fn fail_run_at_start(&mut self, r: usize, why: &str) {
        let path = self.runs[r].wf.path.clone();
        for j in &mut self.runs[r].jobs {
            j.state = JobState::Completed;
            j.conclusion = Some("failure".into());
            j.annotations.push(Annotation {
                level: "error".into(),
                message: why.into(),
                title: None,
                file: Some(path.clone()),
                line: None,
            });
        }
        self.complete_run(r);
    }

    pub(super) fn deliver_run(&mut self, action: &str, r: usize) {
        let run = &self.runs[r];
        let facts = WorkflowRunFacts {
            id: run.id,
            name: run.name.clone(),
            path: run.wf.path.clone(),
            event: run.event.clone(),
            head_sha: run.head_sha.clone(),
            head_branch: run.head_branch.clone(),
            status: match run.status {
                RunStatus::Completed => "completed".into(),
                RunStatus::InProgress => "in_progress".into(),
                _ => "queued".into(),
            },
            conclusion: run.conclusion.clone(),
            actor: run.actor.clone(),
            run_number: run.number,
            check_suite: run.check_suite,
            created_at: crate::support::fake_github::stamp(run.created_at),
            pull_requests: run.pull_requests.clone(),
        };
        self.gh.state().deliver_workflow_run(action, &facts);
    }

    /// Who holds `group`: a run in progress (workflow-level) or a job
    /// admitted or in progress (job-level).
    pub(super) fn holder(&self, group: &str) -> Option<Holder> {
        for (r, run) in self.runs.iter().enumerate() {
            if run.group.as_deref() == Some(group) && matches!(run.status, RunStatus::Queued | RunStatus::InProgress) {
                return Some(Holder::Run(r));
            }
            for (j, job) in run.jobs.iter().enumerate() {
                if job.group.as_deref() == Some(group)
                    && matches!(job.state, JobState::Ready | JobState::InProgress { .. })
                {
                    return Some(Holder::Job(r, j));
                }
            }
        }
        None
    }

    pub(super) fn pending(&self, group: &str) -> Option<Holder> {
        for (r, run) in self.runs.iter().enumerate() {
            if run.group.as_deref() == Some(group) && run.status == RunStatus::Pending {
                return Some(Holder::Run(r));
            }
            for (j, job) in run.jobs.iter().enumerate() {
                if job.group.as_deref() == Some(group) && job.state == JobState::Pending {
                    return Some(Holder::Job(r, j));
                }
            }
        }
        None
    }

    /// GitHub's concurrency: `me` may go (true) or waits pending (false);
    /// an older pending one is cancelled, and with `cancel-in-progress`
    /// the one in progress too.
    pub(super) fn admit(&mut self, group: &str, cancel_in_progress: bool, me: Holder) -> bool {
        if let Some(older) = self.pending(group).filter(|p| *p != me) {
            self.timeline
                .push((self.gh.state().time(), format!("a newer run in `{group}` cancels the pending {older:?}")));
            self.cancel(older);
        }
        match self.holder(group).filter(|h| *h != me) {
            Some(h) if cancel_in_progress => {
                self.cancel(h);
                true
            }
            Some(_) => false,
            None => true,
        }
    }

    pub(super) fn cancel(&mut self, h: Holder) {
        match h {
            Holder::Run(r) => {
                for j in 0..self.runs[r].jobs.len() {
                    if self.runs[r].jobs[j].state != JobState::Completed {
                        self.conclude_job(r, j, "cancelled");
                    }
                }
                self.runs[r].status = RunStatus::InProgress;
                self.complete_run(r);
            }
            Holder::Job(r, j) => {
                self.conclude_job(r, j, "cancelled");
                self.maybe_complete_run(r);
            }
        }
    }

    /// Jobs whose needs are done: their `if:`, then their group.
    pub(super) fn admit_waiting_jobs(&mut self) {
        loop {
            let mut changed = false;
            for r in 0..self.runs.len() {
                if !matches!(self.runs[r].status, RunStatus::Queued | RunStatus::InProgress) {
                    continue;
                }
                for j in 0..self.runs[r].jobs.len() {
                    if self.runs[r].jobs[j].state != JobState::Waiting {
                        continue;
                    }
                    let def = self.runs[r].wf.jobs[j].1.clone();
                    let needs = workflow::needs(&def);
                    let done: Vec<&JobRun> = self.runs[r].jobs.iter().filter(|x| needs.contains(&x.key)).collect();
                    if done.len() < needs.len() || done.iter().any(|x| x.state != JobState::Completed) {
                        continue;
                    }
                    changed = true;
                    // A job's status functions read its needs: success() when all
                    // succeeded, failure() when one failed; a skipped need is neither.
                    let of = |c: &str| done.iter().any(|x| x.conclusion.as_deref() == Some(c));
                    let status = if of("cancelled") {
                        Status::Cancelled
                    } else if of("failure") {
                        Status::Failure
                    } else if of("skipped") {
                        Status::Skipped
                    } else {
                        Status::Success
                    };
                    self.admit_job(r, j, &def, status);
                }
            }
            if !changed {
                return;
            }
        }
    }

    pub(super) fn admit_job(&mut self, r: usize, j: usize, def: &Value, status: Status) {
        let key = self.runs[r].jobs[j].key.clone();
        for unsupported in ["strategy", "container", "services", "uses"] {
            if def.get(unsupported).is_some() {
                self.unsupported.push(format!("{}: job `{key}` uses `{unsupported}:`", self.runs[r].workflow));
                self.fail_job_at_start(r, j, &format!("the test runner does not implement `{unsupported}:`"));
                return;
            }
        }
        let ctx = self.base_contexts(&self.runs[r], Some(j), status, &["github", "needs", "vars", "inputs"]);
        let cond = match def.get("if") {
            Some(Value::Bool(b)) => Ok(*b && status == Status::Success),
            Some(v) => expr::condition(&expr::to_string(v), &ctx),
            None => expr::condition("success()", &ctx),
        };
        match cond {
            Err(e) => return self.fail_job_at_start(r, j, &e),
            Ok(false) => {
                self.conclude_job(r, j, "skipped");
                self.maybe_complete_run(r);
                return;
            }
            Ok(true) => {}
        }
        let ctx = self.base_contexts(
            &self.runs[r],
            Some(j),
            status,
            &["github", "needs", "vars", "inputs", "strategy", "matrix"],
        );
        if let Ok(name) = expr::interpolate(&self.runs[r].jobs[j].name, &ctx) {
            self.runs[r].jobs[j].name = name;
        }
        if let Some((group, cancel)) = def.get("concurrency").and_then(workflow::concurrency) {
            match (expr::interpolate(&group, &ctx), expr::interpolate_value(&cancel, &ctx)) {
                (Ok(g), Ok(c)) => {
                    self.runs[r].jobs[j].group = Some(g.clone());
                    self.runs[r].jobs[j].cancel_in_progress = expr::truthy(&c);
                    if !self.admit(&g, expr::truthy(&c), Holder::Job(r, j)) {
                        self.runs[r].jobs[j].state = JobState::Pending;
                        return;
                    }
                }
                (Err(e), _) | (_, Err(e)) => return self.fail_job_at_start(r, j, &e),
            }
        }
        self.runs[r].jobs[j].state = JobState::Ready;
    }

    pub(super) fn fail_job_at_start(&mut self, r: usize, j: usize, why: &str) {
        let path = self.runs[r].wf.path.clone();
        self.runs[r].jobs[j].annotations.push(Annotation {
            level: "error".into(),
            message: why.into(),
            title: None,
            file: Some(path),
            line: None,
        });
        self.conclude_job(r, j, "failure");
        self.maybe_complete_run(r);
    }

    pub(super) fn ready_job(&self) -> Option<(usize, usize)> {
        for (r, run) in self.runs.iter().enumerate() {
            for (j, job) in run.jobs.iter().enumerate() {
                if job.state == JobState::Ready {
                    return Some((r, j));
                }
            }
        }
        None
    }

    /// Ends a job that never ran (skipped, cancelled, failed at start) or
    /// one whose time is up; its check run says so.
    pub(super) fn conclude_job(&mut self, r: usize, j: usize, conclusion: &str) {
        let now = self.gh.state().time();
        let suite = self.runs[r].check_suite;
        let job = &mut self.runs[r].jobs[j];
        job.state = JobState::Completed;
        job.conclusion = Some(conclusion.into());
        job.completed_at = Some(now);
        let (check, name, annotations) = (job.check_run, job.name.clone(), job.annotations.len());
        if let Some(token) = job.token.take() {
            self.gh.state().revoke(&token);
        }
        let mut s = self.gh.state();
        let check = check.unwrap_or_else(|| s.start_check_run(suite, &name, None));
        s.complete_check_run(check, conclusion, None, None, annotations);
        drop(s);
        self.release(r, Some(j));
    }

    pub(super) fn finish_job(&mut self, r: usize, j: usize) {
        let JobState::InProgress { conclusion, .. } = self.runs[r].jobs[j].state.clone() else { return };
        let what = format!("run {} job {} ends: {conclusion}", self.runs[r].id, self.runs[r].jobs[j].key);
        self.timeline.push((self.gh.state().time(), what));
        self.conclude_job(r, j, &conclusion);
        self.maybe_complete_run(r);
    }

    /// A finished job (or run) frees its group: the pending one goes.
    pub(super) fn release(&mut self, r: usize, j: Option<usize>) {
        let group = match j {
            Some(j) => self.runs[r].jobs[j].group.clone(),
            None => self.runs[r].group.clone(),
        };
        let Some(group) = group else { return };
        if self.holder(&group).is_some() {
            return;
        }
        match self.pending(&group) {
            Some(Holder::Run(p)) => self.runs[p].status = RunStatus::Queued,
            Some(Holder::Job(p, q)) => self.runs[p].jobs[q].state = JobState::Ready,
            None => {}
        }
    }

    pub(super) fn maybe_complete_run(&mut self, r: usize) {
        if self.runs[r].status != RunStatus::Completed
            && self.runs[r].jobs.iter().all(|j| j.state == JobState::Completed)
        {
            self.complete_run(r);
        }
    }

    pub(super) fn complete_run(&mut self, r: usize) {
        let conclusions: Vec<String> = self.runs[r].jobs.iter().filter_map(|j| j.conclusion.clone()).collect();
        let conclusion = if conclusions.iter().any(|c| c == "cancelled") {
            "cancelled"
        } else if conclusions.iter().any(|c| c == "failure") {
            "failure"
        } else if !conclusions.is_empty() && conclusions.iter().all(|c| c == "skipped") {
            "skipped"
        } else {
            "success"
        };
        self.runs[r].status = RunStatus::Completed;
        self.runs[r].conclusion = Some(conclusion.into());
        let suite = self.runs[r].check_suite;
        self.gh.state().complete_check_suite(suite);
        let what = format!("run {} {} completed: {conclusion}", self.runs[r].id, self.runs[r].workflow);
        self.timeline.push((self.gh.state().time(), what));
        self.deliver_run("completed", r);
        self.release(r, None);
    }
}
