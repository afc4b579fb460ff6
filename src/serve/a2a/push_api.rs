//! The push-notification methods of the A2A face, in both versions' shapes, over
//! [`super::Pushes`]: set (1.0 `CreateTaskPushNotificationConfig`, 0.3
//! `tasks/pushNotificationConfig/set`, and a `SendMessage`'s `configuration`), get, list and
//! delete. Each names its task, which must be the caller's (else "task not found").

use serde_json::{Value, json};

use super::push::Config;
use super::{A2a, A2aError, Method, Version, invalid, run_params};
use crate::model::RunId;
use crate::serve::owners::OwnerKey;
use crate::serve::view::RunView;

impl A2a {
    /// One of the four config methods.
    pub(super) async fn push_method(
        &self,
        method: Method,
        version: Version,
        params: &Value,
        owner: &OwnerKey,
    ) -> Result<Value, A2aError> {
        // 1.0 names the task `taskId` and the config `id`; 0.3 names the task `id` (or
        // `taskId` when setting) and the config `pushNotificationConfigId`.
        let (task_field, config_field) = match (version, method) {
            (Version::V1, _) | (Version::V03, Method::PushSet) => ("taskId", "id"),
            (Version::V03, _) => ("id", "pushNotificationConfigId"),
        };
        let task_id = params
            .get(task_field)
            .and_then(Value::as_str)
            .ok_or_else(|| invalid(&format!("params.{task_field}: the task id is required")))?;
        let view = self.owned_task(task_id, owner).await?;
        let run_id = view.run_id.clone();
        let config_id = params.get(config_field).and_then(Value::as_str);
        match method {
            Method::PushSet => {
                let (config, place) = match version {
                    Version::V1 => (params, "params"),
                    Version::V03 => (
                        params.get("pushNotificationConfig").unwrap_or(&Value::Null),
                        "params.pushNotificationConfig",
                    ),
                };
                let config = self.pushes.parse(config, version, place)?;
                self.pushes.register(&self.api, owner, view, config, place)
            }
            Method::PushGet => self.pushes.get(&run_id, config_id, version),
            Method::PushList => {
                let configs = self.pushes.list(&run_id, version)?;
                Ok(match version {
                    Version::V1 => json!({"configs": configs, "nextPageToken": ""}),
                    Version::V03 => json!(configs),
                })
            }
            _ => {
                let id = config_id.ok_or_else(|| {
                    invalid(&format!("params.{config_field}: the config id is required"))
                })?;
                self.pushes.delete(&run_id, id)?;
                Ok(match version {
                    Version::V1 => json!({}),
                    Version::V03 => Value::Null,
                })
            }
        }
    }

    /// A `SendMessage`'s `configuration` naming a webhook (1.0 `taskPushNotificationConfig`,
    /// 0.3 `pushNotificationConfig`), checked before anything starts.
    pub(super) fn push_of_send(
        &self,
        params: &Value,
        version: Version,
    ) -> Result<Option<(Config, String)>, A2aError> {
        let field = match version {
            Version::V1 => "taskPushNotificationConfig",
            Version::V03 => "pushNotificationConfig",
        };
        let Some(config) = params
            .get("configuration")
            .and_then(|configuration| configuration.get(field))
            .filter(|config| !config.is_null())
        else {
            return Ok(None);
        };
        let place = format!("params.configuration.{field}");
        let config = self.pushes.parse(config, version, &place)?;
        Ok(Some((config, place)))
    }

    /// Registers the checked config of a `SendMessage` for the task it answers with.
    pub(super) fn push_on_send(
        &self,
        push: Option<(Config, String)>,
        owner: &OwnerKey,
        view: &RunView,
    ) -> Result<(), A2aError> {
        if let Some((config, place)) = push {
            self.pushes
                .register(&self.api, owner, view.clone(), config, &place)?;
        }
        Ok(())
    }

    /// The caller's task `task_id`.
    async fn owned_task(&self, task_id: &str, owner: &OwnerKey) -> Result<RunView, A2aError> {
        RunId::parse(task_id).map_err(|_| A2aError::TaskNotFound)?;
        let params = run_params(&json!({"id": task_id}))?;
        Ok(self.api.status(owner, &params).await?)
    }
}
