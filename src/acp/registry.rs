//! The backend registry: built-ins, `AGENTPRISM_BACKENDS`, and approved script backends.
