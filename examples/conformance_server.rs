//! The conformance fixture: an [`McpHandler`] with exactly the tools, resources and prompts the
//! `@modelcontextprotocol/conformance` server scenarios call by name, served over Streamable
//! HTTP on 127.0.0.1 by our own MCP core, so the external suites can score the core.
//!
//! The task tools of the `tasks-*` scenarios (`greet`, `slow_compute`, `failing_job`,
//! `protocol_error_job`, `confirm_delete`, `multi_input`, `test_tool_with_task`) run on the
//! core's in-memory task table ([`MemoryTasks`]), so the suite scores the core's task wire.
//!
//! It is test-only and never part of the product's tool list. `tests/conformance/run` builds
//! and starts it. Usage: `conformance_server [PORT]` (or `PORT=`); prints the URL when ready.

use std::sync::Arc;
use std::time::Duration;

use agentprism::mcp::handler::codes;
use agentprism::mcp::tasks::{
    Created, MemoryTasks, TaskCall, TaskHandler, TaskInput, TaskOutcome, TaskPage, TaskState,
    TaskSupport, accepted_content, form_request,
};
use agentprism::mcp::{
    McpError, McpHandler, McpResult, McpServer, NotificationHub, RequestContext, ServerEvent,
    ServerInfo, ServerOptions, Tool, ToolAnswer, ToolHandler, ToolRegistry,
};
use agentprism::transport::{HttpOptions, serve};
use async_trait::async_trait;
use serde_json::{Map, Value, json};

/// A 1x1 transparent PNG.
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";
/// A 44-byte WAV header with no samples.
const WAV: &str = "UklGRiQAAABXQVZFZm10IBAAAAABAAEAQB8AAEAfAAABAAgAZGF0YQAAAAA=";

struct Fixture {
    hub: NotificationHub,
    tools: ToolRegistry,
    tasks: FixtureTasks,
}

/// Answers `tools/call` for every tool of the fixture.
struct FixtureTools {
    hub: NotificationHub,
}

/// The task tools, on the core's in-memory task table.
struct FixtureTasks {
    memory: MemoryTasks,
}

/// How long a fixture task is kept unless the client asks otherwise.
const FIXTURE_TTL_MS: u64 = 5 * 60 * 1000;

fn text(text: &str) -> Value {
    json!({"content": [{"type": "text", "text": text}]})
}

fn task_tool(name: &str, description: &str, support: &str, properties: Value) -> Value {
    json!({
        "name": name,
        "description": description,
        "inputSchema": {"type": "object", "properties": properties},
        "execution": {"taskSupport": support},
    })
}

fn string_argument(arguments: &Value, key: &str, default: &str) -> String {
    arguments
        .get(key)
        .and_then(Value::as_str)
        .unwrap_or(default)
        .to_owned()
}

/// The work of a task tool, `None` for other names.
fn job(name: &str, arguments: &Value) -> Option<agentprism::mcp::tasks::TaskJob> {
    let seconds = arguments
        .get("seconds")
        .and_then(Value::as_f64)
        .unwrap_or(1.0);
    let label = string_argument(arguments, "label", "job");
    let filename = string_argument(arguments, "filename", "file.txt");
    let job: agentprism::mcp::tasks::TaskJob = match name {
        "slow_compute" => Box::new(move |_input| {
            Box::pin(async move {
                tokio::time::sleep(Duration::from_secs_f64(seconds.clamp(0.0, 600.0))).await;
                TaskOutcome::Result(text(&format!("Computed {label} after {seconds} s")))
            })
        }),
        "failing_job" => Box::new(|_input| {
            Box::pin(async {
                tokio::time::sleep(Duration::from_secs(1)).await;
                TaskOutcome::Result(json!({
                    "isError": true,
                    "content": [{"type": "text", "text": "failing_job failed, as it always does"}]
                }))
            })
        }),
        "protocol_error_job" => Box::new(|_input| {
            Box::pin(async {
                TaskOutcome::Error(McpError::internal("protocol_error_job broke on purpose"))
            })
        }),
        "confirm_delete" => Box::new(move |input: TaskInput| {
            Box::pin(async move {
                let schema = json!({"type": "object", "properties": {"confirm": {"type": "boolean"}}, "required": ["confirm"]});
                let mut requests = Map::new();
                requests.insert(
                    "confirm".into(),
                    form_request(&format!("Delete {filename}?"), schema),
                );
                let Some(answers) = input.ask(requests).await else {
                    return TaskOutcome::Result(text("Nothing was deleted"));
                };
                let confirmed = answers
                    .get("confirm")
                    .and_then(accepted_content)
                    .and_then(|content| content.get("confirm"))
                    .and_then(Value::as_bool)
                    == Some(true);
                TaskOutcome::Result(text(&if confirmed {
                    format!("Deleted {filename}")
                } else {
                    format!("Kept {filename}")
                }))
            })
        }),
        "multi_input" => Box::new(|input: TaskInput| {
            Box::pin(async move {
                let mut requests = Map::new();
                let name = json!({"type": "object", "properties": {"name": {"type": "string"}}});
                let confirm =
                    json!({"type": "object", "properties": {"confirm": {"type": "boolean"}}});
                requests.insert("name".into(), form_request("Your name?", name));
                requests.insert("confirm".into(), form_request("Go ahead?", confirm));
                match input.ask(requests).await {
                    Some(answers) => {
                        TaskOutcome::Result(text(&format!("Got {} answers", answers.len())))
                    }
                    None => TaskOutcome::Result(text("No answers")),
                }
            })
        }),
        _ => return None,
    };
    Some(job)
}

fn tool(name: &str, description: &str) -> Value {
    json!({"name": name, "description": description, "inputSchema": {"type": "object", "properties": {}}})
}

/// Every tool of the fixture, as `tools/list` shows it to every client (`execution` included).
fn definitions() -> Vec<Value> {
    let json_schema_tool = json!({
        "name": "json_schema_2020_12_tool",
        "description": "Tool with JSON Schema 2020-12 features",
        "inputSchema": {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "$defs": {
                "address": {
                    "$anchor": "addressDef",
                    "type": "object",
                    "properties": {"street": {"type": "string"}, "city": {"type": "string"}}
                }
            },
            "properties": {
                "name": {"type": "string"},
                "address": {"$ref": "#/$defs/address"},
                "contactMethod": {"type": "string", "enum": ["phone", "email"]},
                "phone": {"type": "string"},
                "email": {"type": "string"}
            },
            "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
            "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
            "then": {"required": ["phone"]},
            "else": {"required": ["email"]},
            "additionalProperties": false
        }
    });
    vec![
        tool("test_simple_text", "Returns simple text"),
        tool("test_image_content", "Returns an image"),
        tool("test_audio_content", "Returns audio"),
        tool("test_embedded_resource", "Returns an embedded resource"),
        tool(
            "test_multiple_content_types",
            "Returns text, image and resource",
        ),
        tool(
            "test_tool_with_logging",
            "Logs three messages while running",
        ),
        tool("test_tool_with_progress", "Reports progress while running"),
        tool("test_error_handling", "Always fails"),
        json_schema_tool,
        tool(
            "test_missing_capability",
            "Needs the client's sampling capability",
        ),
        tool(
            "test_streaming_elicitation",
            "Answers on a request-scoped stream",
        ),
        tool("test_logging_tool", "Logs one message"),
        tool("test_trigger_tool_change", "Publishes tools/list_changed"),
        tool(
            "test_trigger_prompt_change",
            "Publishes prompts/list_changed",
        ),
        json!({"name": "greet", "description": "Says hello to name", "inputSchema": {
            "type": "object", "properties": {"name": {"type": "string"}}
        }}),
        task_tool(
            "slow_compute",
            "Sleeps `seconds`, then answers",
            "optional",
            json!({
                "seconds": {"type": "number"}, "label": {"type": "string"}
            }),
        ),
        task_tool(
            "failing_job",
            "Fails as a tool after about a second",
            "required",
            json!({}),
        ),
        task_tool(
            "protocol_error_job",
            "Fails with a protocol error",
            "optional",
            json!({}),
        ),
        task_tool(
            "confirm_delete",
            "Asks to confirm, then answers",
            "optional",
            json!({
                "filename": {"type": "string"}
            }),
        ),
        task_tool(
            "multi_input",
            "Asks two questions at once",
            "optional",
            json!({}),
        ),
        task_tool(
            "test_tool_with_task",
            "Asks a name, then answers as a task",
            "required",
            json!({}),
        ),
    ]
}

/// The registry of every tool in [`definitions`], each with the task support its `execution`
/// field declares, all answered by one [`FixtureTools`].
fn registry(hub: &NotificationHub) -> ToolRegistry {
    let handler = Arc::new(FixtureTools { hub: hub.clone() });
    let mut tools = ToolRegistry::new();
    for definition in definitions() {
        let support = match definition
            .pointer("/execution/taskSupport")
            .and_then(Value::as_str)
        {
            Some("required") => TaskSupport::Required,
            Some("optional") => TaskSupport::Optional,
            _ => TaskSupport::Forbidden,
        };
        tools
            .register(Tool::new(definition, handler.clone()).with_task_support(support))
            .expect("the fixture's tool definitions are valid");
    }
    tools
}

#[async_trait]
impl ToolHandler for FixtureTools {
    async fn call(
        &self,
        ctx: &RequestContext,
        name: &str,
        arguments: &Value,
    ) -> McpResult<ToolAnswer> {
        self.answer(ctx, name, arguments)
            .await
            .map(ToolAnswer::Value)
    }
}

impl FixtureTools {
    async fn answer(
        &self,
        ctx: &RequestContext,
        name: &str,
        arguments: &Value,
    ) -> McpResult<Value> {
        let log = |message: &str| {
            ctx.notifier.notify(
                "notifications/message",
                json!({"level": "info", "logger": "conformance", "data": message}),
            );
        };
        let pause = || tokio::time::sleep(Duration::from_millis(50));
        match name {
            "test_simple_text" => Ok(text("This is a simple text response for testing.")),
            "test_image_content" => {
                Ok(json!({"content": [{"type": "image", "data": PNG, "mimeType": "image/png"}]}))
            }
            "test_audio_content" => {
                Ok(json!({"content": [{"type": "audio", "data": WAV, "mimeType": "audio/wav"}]}))
            }
            "test_embedded_resource" => Ok(json!({"content": [{"type": "resource", "resource": {
                "uri": "test://embedded-resource",
                "mimeType": "text/plain",
                "text": "This is an embedded resource content."
            }}]})),
            "test_multiple_content_types" => Ok(json!({"content": [
                {"type": "text", "text": "Multiple content types test:"},
                {"type": "image", "data": PNG, "mimeType": "image/png"},
                {"type": "resource", "resource": {
                    "uri": "test://mixed-content-resource",
                    "mimeType": "application/json",
                    "text": "{\"test\":\"data\",\"value\":123}"
                }}
            ]})),
            "test_tool_with_logging" => {
                log("Tool execution started");
                pause().await;
                log("Tool processing data");
                pause().await;
                log("Tool execution completed");
                Ok(text("Tool with logging executed successfully"))
            }
            "test_tool_with_progress" => {
                ctx.progress(0.0, Some(100.0), None);
                pause().await;
                ctx.progress(50.0, Some(100.0), None);
                pause().await;
                ctx.progress(100.0, Some(100.0), None);
                Ok(text("Tool with progress executed successfully"))
            }
            "test_error_handling" => Ok(json!({
                "isError": true,
                "content": [{"type": "text", "text": "This tool intentionally returns an error for testing"}]
            })),
            "json_schema_2020_12_tool" => Ok(text("JSON Schema 2020-12 tool executed")),
            "test_missing_capability" => {
                if ctx.client_has(&["sampling"]) {
                    Ok(text("The client declared sampling"))
                } else {
                    Err(McpError::new(
                        codes::MISSING_CAPABILITY,
                        "this tool needs the client's sampling capability",
                    )
                    .with_data(json!({"requiredCapabilities": {"sampling": {}}})))
                }
            }
            "test_streaming_elicitation" => {
                ctx.progress(0.0, None, Some("started"));
                Ok(text(
                    "Streaming elicitation is answered without a server-to-client request",
                ))
            }
            "test_logging_tool" => {
                log("test_logging_tool ran");
                Ok(text("Logged one message"))
            }
            "test_trigger_tool_change" => {
                self.hub.publish(ServerEvent::ToolsListChanged);
                Ok(text("Published tools/list_changed"))
            }
            "test_trigger_prompt_change" => {
                self.hub.publish(ServerEvent::PromptsListChanged);
                Ok(text("Published prompts/list_changed"))
            }
            "greet" => Ok(text(&format!(
                "Hello, {}!",
                string_argument(arguments, "name", "World")
            ))),
            "slow_compute" | "protocol_error_job" | "confirm_delete" | "multi_input" => {
                // Without a task: the same job, waited for (no input can arrive this way).
                match job(name, arguments) {
                    Some(job) => match job(TaskInput::detached()).await {
                        TaskOutcome::Result(result) => Ok(result),
                        TaskOutcome::Error(error) => Err(error),
                    },
                    None => Err(McpError::invalid_params(format!("unknown tool {name}"))),
                }
            }
            _ => Err(McpError::invalid_params(format!("unknown tool {name}"))),
        }
    }
}

#[async_trait]
impl McpHandler for Fixture {
    fn server_info(&self) -> ServerInfo {
        ServerInfo {
            name: "agentprism-conformance-fixture".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            title: Some("agentprism conformance fixture".into()),
        }
    }

    fn instructions(&self) -> Option<String> {
        Some("Test fixture for the MCP conformance suites.".into())
    }

    fn capabilities(&self) -> Value {
        json!({
            "tools": {"listChanged": true},
            "resources": {"subscribe": true, "listChanged": true},
            "prompts": {"listChanged": true},
            "completions": {},
            "logging": {},
        })
    }

    fn hub(&self) -> &NotificationHub {
        &self.hub
    }

    fn tasks(&self) -> Option<&dyn TaskHandler> {
        Some(&self.tasks)
    }

    fn tools(&self) -> &ToolRegistry {
        &self.tools
    }

    async fn list_tools(&self, _ctx: &RequestContext, _cursor: Option<&str>) -> McpResult<Value> {
        Ok(json!({"tools": definitions()}))
    }

    async fn list_resources(
        &self,
        _ctx: &RequestContext,
        _cursor: Option<&str>,
    ) -> McpResult<Value> {
        Ok(json!({"resources": [
            {"uri": "test://static-text", "name": "static-text", "description": "A static text resource", "mimeType": "text/plain"},
            {"uri": "test://static-binary", "name": "static-binary", "description": "A static binary resource", "mimeType": "image/png"},
            {"uri": "test://watched-resource", "name": "watched-resource", "description": "A resource to subscribe to", "mimeType": "text/plain"},
        ]}))
    }

    async fn list_resource_templates(
        &self,
        _ctx: &RequestContext,
        _cursor: Option<&str>,
    ) -> McpResult<Value> {
        Ok(json!({"resourceTemplates": [{
            "uriTemplate": "test://template/{id}/data",
            "name": "template",
            "description": "A resource template with an id",
            "mimeType": "application/json"
        }]}))
    }

    async fn read_resource(&self, _ctx: &RequestContext, uri: &str) -> McpResult<Value> {
        let content = match uri {
            "test://static-text" => {
                json!({"uri": uri, "mimeType": "text/plain", "text": "This is the content of the static text resource."})
            }
            "test://static-binary" => json!({"uri": uri, "mimeType": "image/png", "blob": PNG}),
            "test://watched-resource" => {
                json!({"uri": uri, "mimeType": "text/plain", "text": "Watched resource content."})
            }
            _ => match uri
                .strip_prefix("test://template/")
                .and_then(|rest| rest.strip_suffix("/data"))
            {
                Some(id) if !id.is_empty() && !id.contains('/') => {
                    let data = json!({"id": id, "templateTest": true, "data": format!("Data for ID: {id}")});
                    json!({"uri": uri, "mimeType": "application/json", "text": data.to_string()})
                }
                _ => {
                    return Err(
                        McpError::new(codes::RESOURCE_NOT_FOUND, "Resource not found")
                            .with_data(json!({"uri": uri})),
                    );
                }
            },
        };
        Ok(json!({"contents": [content]}))
    }

    async fn check_subscribe(&self, _ctx: &RequestContext, _uri: &str) -> McpResult<()> {
        Ok(())
    }

    async fn list_prompts(&self, _ctx: &RequestContext, _cursor: Option<&str>) -> McpResult<Value> {
        Ok(json!({"prompts": [
            {"name": "test_simple_prompt", "description": "A simple prompt"},
            {"name": "test_prompt_with_arguments", "description": "A prompt with arguments", "arguments": [
                {"name": "arg1", "description": "First test argument", "required": true},
                {"name": "arg2", "description": "Second test argument", "required": true}
            ]},
            {"name": "test_prompt_with_embedded_resource", "description": "A prompt embedding a resource", "arguments": [
                {"name": "resourceUri", "description": "URI of the resource to embed", "required": true}
            ]},
            {"name": "test_prompt_with_image", "description": "A prompt with an image"},
        ]}))
    }

    async fn get_prompt(
        &self,
        _ctx: &RequestContext,
        name: &str,
        arguments: Value,
    ) -> McpResult<Value> {
        let argument = |key: &str| {
            arguments
                .get(key)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let user = |content: Value| json!({"role": "user", "content": content});
        let messages = match name {
            "test_simple_prompt" => vec![user(
                json!({"type": "text", "text": "This is a simple prompt for testing."}),
            )],
            "test_prompt_with_arguments" => vec![user(json!({
                "type": "text",
                "text": format!("Prompt with arguments: arg1='{}', arg2='{}'", argument("arg1"), argument("arg2"))
            }))],
            "test_prompt_with_embedded_resource" => vec![
                user(json!({"type": "resource", "resource": {
                    "uri": argument("resourceUri"),
                    "mimeType": "text/plain",
                    "text": "Embedded resource content for testing."
                }})),
                user(
                    json!({"type": "text", "text": "Please process the embedded resource above."}),
                ),
            ],
            "test_prompt_with_image" => vec![
                user(json!({"type": "image", "data": PNG, "mimeType": "image/png"})),
                user(json!({"type": "text", "text": "Please analyze the image above."})),
            ],
            _ => return Err(McpError::invalid_params(format!("unknown prompt {name}"))),
        };
        Ok(json!({"messages": messages}))
    }

    async fn complete(&self, _ctx: &RequestContext, params: Value) -> McpResult<Value> {
        let prefix = params
            .pointer("/argument/value")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let values: Vec<&str> = ["paris", "park", "party"]
            .into_iter()
            .filter(|value| value.starts_with(prefix))
            .collect();
        Ok(json!({"completion": {"values": values, "total": values.len(), "hasMore": false}}))
    }
}

#[async_trait]
impl TaskHandler for FixtureTasks {
    async fn create(&self, ctx: &RequestContext, call: TaskCall) -> McpResult<Created> {
        let ttl = call.ttl_ms.unwrap_or(FIXTURE_TTL_MS);
        if call.name == "test_tool_with_task" {
            // Round one asks for the name (SEP-2322); round two, with the answer, is a task.
            let answer = call
                .input_responses
                .as_ref()
                .and_then(|responses| responses.get("user_name"))
                .and_then(accepted_content)
                .and_then(|content| content.get("name"))
                .and_then(Value::as_str)
                .map(str::to_owned);
            let Some(user) = answer else {
                let schema = json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]});
                return Ok(Created::Answer(json!({
                    "resultType": "input_required",
                    "inputRequests": {"user_name": form_request("What is your name?", schema)},
                })));
            };
            let job: agentprism::mcp::tasks::TaskJob = Box::new(move |_input| {
                Box::pin(async move { TaskOutcome::Result(text(&format!("Hello, {user}!"))) })
            });
            return Ok(Created::Task(self.memory.start(ctx, ttl, job)));
        }
        match job(&call.name, &call.arguments) {
            Some(job) => Ok(Created::Task(self.memory.start(ctx, ttl, job))),
            None => Err(McpError::invalid_params(format!(
                "unknown task tool {}",
                call.name
            ))),
        }
    }

    async fn get(&self, ctx: &RequestContext, task_id: &str) -> McpResult<TaskState> {
        self.memory.get(ctx, task_id)
    }

    async fn cancel(&self, ctx: &RequestContext, task_id: &str) -> McpResult<TaskState> {
        self.memory.cancel(ctx, task_id)
    }

    async fn list(&self, ctx: &RequestContext, _cursor: Option<&str>) -> McpResult<TaskPage> {
        Ok(self.memory.list(ctx))
    }

    async fn answer(
        &self,
        ctx: &RequestContext,
        task_id: &str,
        responses: &Map<String, Value>,
    ) -> McpResult<()> {
        self.memory.answer(ctx, task_id, responses)
    }

    async fn changed(&self, ctx: &RequestContext, seen: &TaskState) -> McpResult<TaskState> {
        self.memory.changed(ctx, seen).await
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let port: u16 = match std::env::args()
        .nth(1)
        .or_else(|| std::env::var("PORT").ok())
    {
        Some(text) => text.parse()?,
        None => 0,
    };
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    let address = listener.local_addr()?;
    let hub = NotificationHub::new();
    let handler = Arc::new(Fixture {
        tools: registry(&hub),
        tasks: FixtureTasks {
            memory: MemoryTasks::new(hub.clone()),
        },
        hub,
    });
    let server = Arc::new(McpServer::new(handler, ServerOptions::default()));
    println!("http://{address}/mcp");
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    serve(listener, server, HttpOptions::default(), shutdown).await
}
