//! The starting point `agentprism workflows new <name>` writes: a short workflow whose
//! comments say what each part is for, and which passes `agentprism validate <name> --args
//! '{"model":"mock"}'` as written.

/// The starter text for a workflow saved as `name`.
pub fn starter(name: &str) -> String {
    STARTER.replace("{name}", name)
}

const STARTER: &str = r#"// {name}: a saved workflow. Check it without spending tokens, then run it:
//   agentprism validate {name} --args '{"model":"mock"}'
//   agentprism run {name} --args '{"model":"claude","question":"What does this project do?"}'
// docs/workflows.md describes saved workflows, docs/engine.md what a script may call.

// `meta` is read without running the script, so it stays a plain literal.
export const meta = {
  name: '{name}',
  // One line: what the workflow does. `agentprism workflows` and MCP hosts show it.
  description: 'Answer a question about the project with one agent',
  // When a person, or a model choosing among workflows, should reach for this one.
  whenToUse: 'When one short, structured answer to a question is enough',
  // The stages a run reports its progress in; `phase()` below enters one.
  phases: [{ title: 'Answer' }],
  // The run's input (the `args` global), checked before anything starts.
  inputSchema: {
    type: 'object',
    properties: {
      model: {
        type: 'string',
        description: 'Where the agents run: a backend, or backend/model (claude, codex/o3, mock)',
      },
      question: { type: 'string', description: 'What to ask' },
    },
    required: ['model'],
  },
};

phase('Answer');
// With a schema the agent's answer is JSON of that shape; one that does not fit is asked for again.
const answer = await agent(
  `Answer in one or two sentences: ${args.question ?? 'What does this project do?'}`,
  {
    model: args.model,
    label: 'answer',
    schema: {
      type: 'object',
      properties: {
        answer: { type: 'string' },
        confident: { type: 'boolean' },
      },
      required: ['answer', 'confident'],
    },
  },
);
log('answer:', answer.answer);
// What the script returns is the run's result.
return answer;
"#;

#[cfg(test)]
mod tests {
    use super::starter;

    #[test]
    fn the_starter_names_its_workflow_and_declares_the_model_argument() {
        let text = starter("my-flow");
        assert!(text.contains("name: 'my-flow'"));
        assert!(text.contains("agentprism validate my-flow"));
        assert!(!text.contains("{name}"));
        assert!(text.contains("required: ['model']"));
    }
}
