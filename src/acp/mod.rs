//! The Agent Client Protocol runner: the engine's [`AgentRunner`] over real agent processes.
//!
//! Reading order: [`registry`] decides which command a backend name runs; [`process`] spawns
//! it in its own process group (its stderr kept by [`stderr`]), led by a [`reaper`] that ends
//! the group with its owner, and [`groups`] records each group so the next owner can end what
//! a dead one left; [`connection`] speaks NDJSON JSON-RPC to it; the pool keeps long-lived
//! initialized processes per backend and `idle` stops the ones nobody uses; a session opens,
//! configures and prompts on one of them; `content` fits a turn's content blocks to what the
//! agent accepts (a text note in place of an image it cannot take); `failure` maps ACP errors
//! to the engine's failure kinds (with `advice` for failures that show a setup problem), and
//! `chatter` keeps adapter warnings and retry notices out of answers. A probe's report of the
//! session it opened is put together by `catalog`, with pi's own model preferences from
//! `pi_scope`. `slots` holds a session back while its backend's concurrency cap is reached.

mod advice;
pub(crate) mod catalog;
mod chatter;
pub(crate) mod connection;
mod file_roots;
mod content;
mod failure;
mod output_tool;
pub(crate) mod groups;
pub mod lookup;
mod idle;
pub(crate) mod pi_scope;
mod pool;
pub(crate) mod process;
pub(crate) mod reaper;
pub(crate) mod registry;
mod reset;
mod session;
pub(crate) mod slots;
mod transcript;
mod verdict;
pub(crate) mod stderr;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::json;

use crate::engine::runner::{
    AgentFailure, AgentObserver, AgentRunner, AgentSession, AgentUpdate, BackendSpec, FailureKind,
    PermissionOutcome, PermissionRequest, ProbeReport, SessionSpec,
};
use crate::env::{self, EnvSnapshot};

/// How the runner treats backend processes.
#[derive(Clone, Debug)]
pub struct AcpConfig {
    /// Long-lived processes per backend (at least 1); each multiplexes many sessions, except
    /// on adapters that hold one session at a time (pi-acp), where a session finding them all
    /// busy gets a process of its own for its lifetime.
    pub pool_size: usize,
    /// Deadline for `initialize`, and for each session setup request, so a command that is
    /// not an ACP agent fails instead of hanging.
    pub init_timeout: Duration,
    /// How long a cancelled or timed-out turn may take to end after `session/cancel` before
    /// the process group is killed.
    pub cancel_grace: Duration,
    /// Per shutdown phase (after EOF, after SIGTERM), capped by the shutdown deadline.
    pub shutdown_grace: Duration,
    /// How long a pooled process may sit with no session before it is stopped; `None` keeps
    /// it until shutdown.
    pub idle_ttl: Option<Duration>,
    /// The environment every agent inherits (plus its backend's `env`).
    pub base_env: EnvSnapshot,
    /// Reaper and group records; the default has neither (see [`process::Supervision`]).
    pub supervision: process::Supervision,
    /// Sessions each backend may hold at once across every run (`maxConcurrent`), by
    /// backend name in lower case; a backend not named has no cap.
    pub caps: BTreeMap<String, u32>,
}

impl AcpConfig {
    /// Defaults: pool size 1, 60 s init timeout, 5 s cancel grace, 5 s shutdown grace.
    pub fn new(base_env: EnvSnapshot) -> AcpConfig {
        AcpConfig {
            pool_size: 1,
            init_timeout: Duration::from_millis(60_000),
            cancel_grace: Duration::from_secs(5),
            shutdown_grace: Duration::from_secs(5),
            idle_ttl: Some(idle::DEFAULT_IDLE_TTL),
            base_env,
            supervision: process::Supervision::default(),
            caps: BTreeMap::new(),
        }
    }

    /// Reads `AGENTPRISM_ACP_POOL_SIZE`, `AGENTPRISM_ACP_INIT_TIMEOUT_MS`,
    /// `AGENTPRISM_ACP_IDLE_TTL_MS` (`0`: idle processes stay) and the backends'
    /// `maxConcurrent` in `AGENTPRISM_BACKENDS`; `env` is also the agents' base environment.
    /// Errors name the variable (and the backend and key).
    pub fn from_env(env: &EnvSnapshot) -> Result<AcpConfig, String> {
        let mut config = AcpConfig::new(env.clone());
        let pool_size = env.u64_or(env::ACP_POOL_SIZE, 1)?;
        config.pool_size = usize::try_from(pool_size).unwrap_or(usize::MAX).max(1);
        config.init_timeout = Duration::from_millis(env.u64_or(env::ACP_INIT_TIMEOUT_MS, 60_000)?);
        let default_idle = u64::try_from(idle::DEFAULT_IDLE_TTL.as_millis()).unwrap_or(u64::MAX);
        config.idle_ttl = match env.u64_or(env::ACP_IDLE_TTL_MS, default_idle)? {
            0 => None,
            ms => Some(Duration::from_millis(ms)),
        };
        config.caps = slots::caps_from_env(env)?;
        Ok(config)
    }
}

/// The ACP implementation of [`AgentRunner`]: one per process, shared by every run.
pub struct AcpRunner {
    pool: pool::Pool,
    output_tools: output_tool::OutputTools,
    slots: slots::BackendSlots,
}

impl AcpRunner {
    pub fn new(config: AcpConfig) -> AcpRunner {
        AcpRunner {
            slots: slots::BackendSlots::new(config.caps.clone()),
            pool: pool::Pool::new(config),
            output_tools: output_tool::OutputTools::default(),
        }
    }

    async fn open(
        &self,
        spec: &SessionSpec,
        observer: Arc<dyn AgentObserver>,
    ) -> Result<(session::AcpSession, session::Opened), AgentFailure> {
        let lease = self.pool.acquire(&spec.backend).await?;
        let config = self.pool.config();
        session::open(
            lease,
            spec,
            observer,
            &self.output_tools,
            config.init_timeout,
            config.cancel_grace,
        )
        .await
    }
}

#[async_trait]
impl AgentRunner for AcpRunner {
    async fn open_session(
        &self,
        spec: SessionSpec,
        observer: Arc<dyn AgentObserver>,
    ) -> Result<Box<dyn AgentSession>, AgentFailure> {
        // The slot comes first, so a waiting call holds no agent process.
        let slot = self.slots.take(&spec.backend.id, observer.as_ref()).await;
        let (session, _) = self.open(&spec, observer).await?;
        Ok(match slot {
            Some(slot) => Box::new(slots::SlottedSession {
                session: Box::new(session),
                _slot: slot,
            }),
            None => Box::new(session),
        })
    }

    async fn probe(&self, backend: &BackendSpec, model: Option<&str>, cwd: &Path) -> ProbeReport {
        let spec = SessionSpec {
            backend: backend.clone(),
            model: model.map(str::to_owned),
            mode: None,
            config_options: Vec::new(),
            effort: None,
            cwd: cwd.to_path_buf(),
            mcp_servers: json!([]),
            meta: None,
            output_schema: None,
            resume_session: None,
            run_id: String::new(),
            call_index: 0,
            label: "probe".to_owned(),
        };
        let mut report = ProbeReport {
            backend: backend.id.clone(),
            ..ProbeReport::default()
        };
        // The methods come from `initialize`, so they are worth reporting even when the
        // session itself fails (the typical auth-required case).
        let lease = match self.pool.acquire(backend).await {
            Ok(lease) => lease,
            Err(failure) => {
                report.error = Some(failure.message);
                return report;
            }
        };
        report.started = true;
        report.auth_methods = lease.host().auth_methods.clone();
        let pi_agent_dir = lease.host().pi_agent_dir.clone();
        let config = self.pool.config();
        let opened = session::open(
            lease,
            &spec,
            Arc::new(IgnoringObserver),
            &self.output_tools,
            config.init_timeout,
            config.cancel_grace,
        )
        .await;
        match opened {
            Ok((session, info)) => {
                Box::new(session).close().await;
                catalog::record_session(&mut report, info.info(), pi_agent_dir.as_deref(), cwd)
                    .await;
            }
            Err(failure) => {
                report.auth_required = failure.kind == FailureKind::AuthRequired;
                report.error = Some(failure.message);
            }
        }
        report
    }

    async fn release_probed(&self) {
        self.pool.release_unprompted().await;
    }

    async fn shutdown(&self, deadline: Duration) {
        self.pool.shutdown(deadline).await;
    }
}

/// A probe prompts nothing, so it has nothing to show and nobody to ask.
struct IgnoringObserver;

#[async_trait]
impl AgentObserver for IgnoringObserver {
    fn update(&self, _update: AgentUpdate) {}

    async fn request_permission(&self, _request: PermissionRequest) -> PermissionOutcome {
        PermissionOutcome::Cancelled
    }
}

#[cfg(test)]
mod tests;
