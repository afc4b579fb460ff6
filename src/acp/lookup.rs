//! The engine's view of the backend registry: routing lookups plus the default backend
//! named by `AGENTPRISM_DEFAULT_BACKEND`, both fixed when the process reads its environment.

use crate::acp::registry::BackendRegistry;
use crate::engine::routing::BackendLookup;
use crate::engine::runner::BackendSpec;
use crate::env::EnvSnapshot;

/// Registered backends as routing sees them.
pub struct Backends {
    registry: BackendRegistry,
    default: Option<String>,
}

impl Backends {
    /// Resolves the registry from the environment; errors name the variable and field.
    pub fn from_env(env: &EnvSnapshot) -> Result<Backends, String> {
        let registry = BackendRegistry::from_env(env)?;
        let default = registry.default_backend(env).map(|spec| spec.id.clone());
        Ok(Backends { registry, default })
    }

    pub fn registry(&self) -> &BackendRegistry {
        &self.registry
    }
}

impl BackendLookup for Backends {
    fn backend(&self, name: &str) -> Option<BackendSpec> {
        self.registry.get(name).cloned()
    }

    fn default_backend(&self) -> Option<String> {
        self.default.clone()
    }

    fn names(&self) -> Vec<String> {
        self.registry.names()
    }
}
