// Review a diff with a panel: several reviewers read `git diff <base>` independently, then
// every finding is put to a few judges who vote to keep or drop it, and the report keeps the
// findings most judges upheld. Copy it (`agentprism workflows show review-panel --copy`) to
// change the prompts, the finding shape or the vote rule.
export const meta = {
  name: 'review-panel',
  description: 'Review the working diff with a panel of reviewers, then let judges vote on every finding',
  whenToUse: 'Before committing or merging a change: a second opinion on a diff that filters out weak findings by majority vote.',
  phases: [
    { title: 'Review', detail: 'reviewers read the diff and report findings' },
    { title: 'Judge', detail: 'judges vote to keep or drop each finding' },
    { title: 'Report', detail: 'the findings a majority kept' },
  ],
  inputSchema: {
    type: 'object',
    properties: {
      model: { type: 'string', minLength: 1, description: 'backend or backend/model for every call' },
      judgeModel: { type: 'string', minLength: 1, description: 'route for the judges (default: model)' },
      base: { type: 'string', minLength: 1, description: 'what to diff against (default HEAD)' },
      focus: { type: 'string', description: 'what the reviewers look at most closely' },
      reviewers: { type: 'integer', minimum: 1, maximum: 8, description: 'independent reviewers (default 3)' },
      judges: { type: 'integer', minimum: 1, maximum: 7, description: 'votes per finding (default 3)' },
      maxFindings: { type: 'integer', minimum: 1, maximum: 50, description: 'findings put to the judges (default 6)' },
    },
    // An argument the script does not know is refused, so a misspelt knob is not ignored.
    additionalProperties: false,
    required: ['model'],
  },
};

const base = args.base ?? 'HEAD';
const reviewers = args.reviewers ?? 3;
const judges = args.judges ?? 3;
// Defaults keep a run at 3 reviewers + 6 findings x 3 judges = 21 agent calls.
const maxFindings = args.maxFindings ?? 6;
const judgeModel = args.judgeModel ?? args.model;
const focus = args.focus ? `\nLook most closely at: ${args.focus}.` : '';

const findingSchema = {
  type: 'object',
  properties: {
    findings: {
      type: 'array',
      items: {
        type: 'object',
        properties: {
          file: { type: 'string' },
          line: { type: 'integer', minimum: 0 },
          severity: { enum: ['high', 'medium', 'low'] },
          problem: { type: 'string' },
        },
        required: ['file', 'severity', 'problem'],
      },
    },
  },
  required: ['findings'],
};

phase('Review');
// Each reviewer works alone, so agreement between them means something.
const reviews = await parallel(
  Array.from({ length: reviewers }, (_, i) => () =>
    agent(
      `Run \`git diff ${base}\` in this repository and review the change. Report real defects ` +
        `only (bugs, broken edge cases, security or data-loss risks), not style.${focus}`,
      { model: args.model, label: `review:${i}`, schema: findingSchema },
    ),
  ),
);
// A failed reviewer resolves to null; the others still count. The same problem reported by
// two reviewers is judged once.
const seen = new Set();
const findings = [];
for (const review of reviews) {
  for (const finding of review?.findings ?? []) {
    const key = `${finding.file}:${finding.line ?? ''}:${finding.problem}`;
    if (!seen.has(key) && findings.length < maxFindings) {
      seen.add(key);
      findings.push(finding);
    }
  }
}

phase('Judge');
const voteSchema = {
  type: 'object',
  properties: { keep: { type: 'boolean' }, reason: { type: 'string' } },
  required: ['keep', 'reason'],
};
const verdicts = await parallel(
  findings.flatMap((finding, f) =>
    Array.from({ length: judges }, (_, j) => () =>
      agent(
        `A reviewer reports this problem in \`git diff ${base}\`:\n\n` +
          `${finding.file}${finding.line ? `:${finding.line}` : ''} (${finding.severity}): ${finding.problem}\n\n` +
          'Check it against the code. Keep it only if it is a real defect worth fixing.',
        { model: judgeModel, label: `judge:${f}:${j}`, schema: voteSchema },
      ),
    ),
  ),
);

phase('Report');
const kept = [];
const dropped = [];
findings.forEach((finding, f) => {
  const votes = verdicts.slice(f * judges, (f + 1) * judges);
  const keeps = votes.filter((vote) => vote?.keep === true).length;
  // A strict majority of all judges, so a failed judge counts against the finding.
  const entry = { ...finding, keeps, judges, reasons: votes.map((vote) => vote?.reason ?? null) };
  (keeps * 2 > judges ? kept : dropped).push(entry);
});
return { base, kept, dropped: dropped.length, reviewers: reviews.filter(Boolean).length };
