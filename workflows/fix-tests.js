// Fix failing tests with several independent attempts: one agent diagnoses the failure, then
// each attempt works in a git worktree of its own (your tree never changes), and a judge picks
// the best. You apply the one you want with `agentprism changes`. Copy it (`agentprism
// workflows show fix-tests --copy`) to change the attempts' instructions or the judging.
export const meta = {
  name: 'fix-tests',
  description: 'Make a failing test command pass with isolated attempts in worktrees, and pick the best',
  whenToUse: 'A test command fails and you want candidate fixes on branches to compare and apply, without touching your working tree.',
  phases: [
    { title: 'Diagnose', detail: 'why the command fails' },
    { title: 'Attempt', detail: 'isolated attempts at a fix, each on a branch of its own' },
    { title: 'Judge', detail: 'pick the best attempt' },
  ],
  inputSchema: {
    type: 'object',
    properties: {
      model: { type: 'string', minLength: 1, description: 'backend or backend/model for every call' },
      judgeModel: { type: 'string', minLength: 1, description: 'route for the judge (default: model)' },
      command: { type: 'string', minLength: 1, description: 'the test command that fails, e.g. "cargo test"' },
      attempts: { type: 'integer', minimum: 1, maximum: 8, description: 'isolated attempts (default 3)' },
    },
    // An argument the script does not know is refused, so a misspelt knob is not ignored.
    additionalProperties: false,
    required: ['model', 'command'],
  },
  // Attempts are open-ended, so the run has a token budget; `--token-budget N` on the command
  // line (or `tokenBudget` over MCP) sets another one.
  tokenBudget: 3000000,
};

// Defaults keep a run at 1 + 3 + 1 = 5 agent calls.
const attempts = args.attempts ?? 3;

phase('Diagnose');
const diagnosis = await agent(
  `Run \`${args.command}\` in this repository. Explain why it fails: which tests, the ` +
    'cause as far as you can tell, and where a fix belongs. Do not change any file.',
  { model: args.model, label: 'diagnose' },
);

phase('Attempt');
const reportSchema = {
  type: 'object',
  properties: {
    fixed: { type: 'boolean', description: 'the command now passes' },
    passing: { type: 'string', description: 'the command output summary: tests passed and failed' },
    summary: { type: 'string', description: 'what you changed and why' },
  },
  required: ['fixed', 'passing', 'summary'],
};
// isolated() answers with the agent's report and the branch its changes were committed on.
const tries = await parallel(
  Array.from({ length: attempts }, (_, i) => () =>
    isolated(
      `\`${args.command}\` fails in this repository. A diagnosis:\n\n${diagnosis ?? '(none)'}\n\n` +
        `Fix the code so the command passes (attempt ${i + 1} of ${attempts}; try your own ` +
        'approach). Do not weaken or delete tests. Run the command again before you answer.',
      { model: args.model, label: `attempt:${i}`, schema: reportSchema },
    ),
  ),
);
// An attempt that failed, or changed nothing, has no branch to apply.
const candidates = tries
  .map((attempt, i) => ({ i, attempt }))
  .filter(({ attempt }) => attempt?.changes?.branch);
const attemptsOut = tries.map((attempt, i) => ({
  attempt: i,
  branch: attempt?.changes?.branch ?? null,
  report: attempt?.result ?? null,
}));
if (candidates.length === 0) {
  return { best: null, apply: null, attempts: attemptsOut, diagnosis };
}

phase('Judge');
let chosen = candidates[0];
if (candidates.length > 1) {
  const listing = candidates
    .map(({ attempt }, n) =>
      `## Candidate ${n}\nReport: ${JSON.stringify(attempt.result)}\nDiff:\n${attempt.changes.diff}`)
    .join('\n\n');
  const verdict = await agent(
    `Several attempts tried to make \`${args.command}\` pass. Pick the best: it must really fix ` +
      `the cause, keep the tests honest, and change as little as needed.\n\n${listing}`,
    {
      model: args.judgeModel ?? args.model,
      label: 'judge',
      schema: {
        type: 'object',
        properties: { candidate: { type: 'integer', minimum: 0 }, reason: { type: 'string' } },
        required: ['candidate', 'reason'],
      },
    },
  );
  chosen = candidates[Math.min(verdict?.candidate ?? 0, candidates.length - 1)];
}
// Branches are named agentprism/<runId>/<call index>-<label>; `changes --apply` takes the index.
const [, runId, leaf] = chosen.attempt.changes.branch.split('/');
const callIndex = leaf.split('-')[0];
return {
  best: { attempt: chosen.i, branch: chosen.attempt.changes.branch, report: chosen.attempt.result },
  apply: `agentprism changes ${runId} --apply ${callIndex}`,
  attempts: attemptsOut,
  diagnosis,
};
