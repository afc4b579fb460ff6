// Fix failing tests several ways at once: each attempt works in a git worktree of its own,
// so your tree never changes, and a judge panel picks the best attempt. Take the winner with
// the `git merge` the result names, or look at every attempt with `agentprism changes <runId>`. The project must
// be a git repository with a commit. Set a spending limit with `--token-budget` (CLI) or by
// adding `tokenBudget` to this meta in your copy.
export const meta = {
  name: 'fix-tests',
  description: 'Fix failing tests with several isolated attempts in git worktrees, then keep the one a judge panel prefers',
  whenToUse: 'When a test command fails and you want a fix to review as a branch, without any agent touching your working tree.',
  phases: [
    { title: 'Diagnose', detail: 'run the tests once and say what fails' },
    { title: 'Attempt', detail: 'independent fixes, each in its own worktree' },
    { title: 'Judge', detail: 'judges score the attempts that changed something' },
  ],
  inputSchema: {
    type: 'object',
    properties: {
      model: { type: 'string', description: 'Backend (or backend/model) for the attempts' },
      judgeModel: { type: 'string', description: 'Backend (or backend/model) for the diagnosis and the judges; defaults to model' },
      command: { type: 'string', description: 'The test command, e.g. "cargo test" or "npm test"' },
      attempts: { type: 'integer', minimum: 1, maximum: 6, default: 3 },
      judges: { type: 'integer', minimum: 1, maximum: 5, default: 2 },
      notes: { type: 'string', description: 'Extra guidance for every attempt, e.g. "do not touch the snapshots"' },
    },
    required: ['model', 'command'],
  },
};

const attempts = args.attempts ?? 3;
const judgeModel = args.judgeModel ?? args.model;

phase('Diagnose');
const diagnosis = await agent(
  `Run \`${args.command}\` in this repository. Do not change any file. Say which tests fail and the most likely cause of each.`,
  { label: 'diagnose', model: judgeModel, schema: { type: 'object', properties: { failing: { type: 'array', items: { type: 'string' } }, causes: { type: 'string' } }, required: ['failing', 'causes'] } },
);
if (diagnosis && diagnosis.failing.length === 0) return { fixed: false, reason: 'no failing tests', diagnosis };

phase('Attempt');
const approaches = ['the smallest change that makes the tests pass', 'a fix of the root cause, even if larger', 'a different approach from the obvious one'];
const tries = await parallel(Array.from({ length: attempts }, (_, i) => () =>
  isolated(
    `\`${args.command}\` fails. Diagnosis: ${JSON.stringify(diagnosis)}\n` +
      `Fix it with ${approaches[i % approaches.length]}. Change code, not the tests' expectations, unless a test is wrong. ` +
      `Run \`${args.command}\` until it passes, then report.` +
      (args.notes ? `\n${args.notes}` : ''),
    { label: `attempt:${i + 1}`, model: args.model, schema: { type: 'object', properties: { fixed: { type: 'boolean' }, summary: { type: 'string' } }, required: ['fixed', 'summary'] } },
  )));

const candidates = tries
  .map((attempt, i) => ({ index: i, attempt }))
  .filter(({ attempt }) => attempt && attempt.changes.branch);
if (candidates.length === 0) return { fixed: false, reason: 'no attempt changed anything', diagnosis };

phase('Judge');
// Each judge names the best attempt; the attempt most judges name wins (the earlier one on a tie).
let best = 0;
if (candidates.length > 1) {
  const shown = candidates
    .map(({ attempt }, n) => `### Attempt ${n}\n${attempt.result?.summary ?? ''}\n\n${attempt.changes.diff}`)
    .join('\n\n');
  const votes = await parallel(Array.from({ length: args.judges ?? 2 }, (_, j) => () =>
    agent(
      `These attempts each try to make \`${args.command}\` pass:\n\n${shown}\n\n` +
        'Which one fixes it most correctly, with the least risk? Answer its number.',
      { label: `judge:${j + 1}`, model: judgeModel, schema: { type: 'object', properties: { best: { type: 'integer', minimum: 0, maximum: candidates.length - 1 }, reason: { type: 'string' } }, required: ['best', 'reason'] } },
    )));
  const tally = candidates.map((_, n) => votes.filter((vote) => vote?.best === n).length);
  best = tally.indexOf(Math.max(...tally));
}
const winner = candidates[best];
return {
  fixed: winner.attempt.result?.fixed === true,
  branch: winner.attempt.changes.branch,
  summary: winner.attempt.result?.summary ?? null,
  branches: candidates.map(({ attempt }) => attempt.changes.branch),
  apply: `git merge ${winner.attempt.changes.branch}`,
};
