// Review a change with a panel: several reviewers read it from different angles, then a
// panel of judges votes on each finding, and only findings a majority keeps are reported.
// Copy it into your project with `agentprism workflows show review-panel --copy` and change
// the lenses, the rubric or the sizes to taste.
export const meta = {
  name: 'review-panel',
  description: 'Review a diff with several reviewers, then let a judge panel keep only the findings a majority agrees with',
  whenToUse: 'Before merging a change you want more than one pair of eyes on: a branch, a pull request or the uncommitted work in this repository.',
  phases: [
    { title: 'Review', detail: 'each reviewer reads the change through one lens' },
    { title: 'Judge', detail: 'judges vote keep or drop on every finding' },
    { title: 'Report', detail: 'one summary of the findings the panel kept' },
  ],
  inputSchema: {
    type: 'object',
    properties: {
      model: { type: 'string', description: 'Backend (or backend/model) every agent uses, e.g. "claude" or "codex/gpt-5"' },
      judgeModel: { type: 'string', description: 'Backend (or backend/model) for the judges; defaults to model' },
      diff: { type: 'string', description: 'What to review: a git range such as "main...HEAD" (default: the uncommitted changes)' },
      reviewers: { type: 'integer', minimum: 1, maximum: 8, default: 3 },
      judges: { type: 'integer', minimum: 1, maximum: 5, default: 3 },
      maxFindings: { type: 'integer', minimum: 1, maximum: 20, default: 6 },
    },
    required: ['model'],
  },
};

const reviewers = args.reviewers ?? 3;
const judges = args.judges ?? 3;
const maxFindings = args.maxFindings ?? 6;
const judgeModel = args.judgeModel ?? args.model;
const range = args.diff ? `git diff ${args.diff}` : 'git diff HEAD';
const lenses = ['correctness and edge cases', 'security and data handling', 'readability and maintainability', 'tests and error handling'];

const finding = {
  type: 'object',
  properties: {
    title: { type: 'string' },
    file: { type: 'string' },
    severity: { type: 'string', enum: ['high', 'medium', 'low'] },
    detail: { type: 'string' },
  },
  required: ['title', 'file', 'severity', 'detail'],
};

phase('Review');
const reviews = await parallel(
  Array.from({ length: reviewers }, (_, i) => () =>
    agent(
      `Review the change shown by \`${range}\` in this repository. Focus on ${lenses[i % lenses.length]}.\n` +
        'Report only real defects a maintainer would fix, each with the file it is in.',
      { label: `review:${i + 1}`, model: args.model, schema: { type: 'object', properties: { findings: { type: 'array', items: finding } }, required: ['findings'] } },
    ),
  ),
);

// The same defect reported by two reviewers is judged once.
const seen = new Set();
const findings = [];
for (const review of reviews) {
  for (const item of review?.findings ?? []) {
    const key = `${item.file}\u0000${item.title}`.toLowerCase();
    if (!seen.has(key) && findings.length < maxFindings) {
      seen.add(key);
      findings.push(item);
    }
  }
}

phase('Judge');
const verdict = { type: 'object', properties: { keep: { type: 'boolean' }, reason: { type: 'string' } }, required: ['keep', 'reason'] };
const judged = await parallel(
  findings.map((item, n) => async () => {
    const votes = await parallel(
      Array.from({ length: judges }, (_, j) => () =>
        agent(
          `A reviewer reports this defect in the change shown by \`${range}\`:\n\n${JSON.stringify(item, null, 2)}\n\n` +
            'Check it against the code. Keep it only if it is real and worth fixing.',
          { label: `judge:${n + 1}:${j + 1}`, model: judgeModel, schema: verdict },
        ),
      ),
    );
    const keeps = votes.filter((vote) => vote?.keep).length;
    return { ...item, keeps, votes: votes.length, kept: keeps * 2 > votes.length };
  }),
);
const kept = judged.filter((item) => item?.kept);

phase('Report');
const summary = kept.length === 0
  ? 'The panel kept no findings.'
  : await agent(
      `Write a short review summary for the author of the change shown by \`${range}\`, one paragraph per finding, most severe first:\n\n${JSON.stringify(kept, null, 2)}`,
      { label: 'report', model: args.model },
    );
return { summary, kept, dropped: judged.filter((item) => item && !item.kept) };
