// Audit a codebase area by area: an agent splits the code into areas (unless you name them),
// one auditor per area reports findings, and every finding is handed to a verifier told to
// refute it. Only findings that survive refutation reach the report. Copy it (`agentprism
// workflows show audit --copy`) to change what the auditors look for.
export const meta = {
  name: 'audit',
  description: 'Audit a codebase by area and keep only the findings that survive an attempt to refute them',
  whenToUse: 'A review of a whole repository or a large part of it (bugs, security, robustness) where false positives are costly.',
  phases: [
    { title: 'Plan', detail: 'split the codebase into areas' },
    { title: 'Audit', detail: 'one auditor per area' },
    { title: 'Refute', detail: 'a verifier tries to refute each finding' },
    { title: 'Report', detail: 'the confirmed findings' },
  ],
  inputSchema: {
    type: 'object',
    properties: {
      model: { type: 'string', minLength: 1, description: 'backend or backend/model for every call' },
      verifierModel: { type: 'string', minLength: 1, description: 'route for the verifiers (default: model)' },
      areas: { type: 'array', items: { type: 'string', minLength: 1 }, minItems: 1, description: 'areas (folders, modules) to audit (default: chosen by an agent)' },
      maxAreas: { type: 'integer', minimum: 1, maximum: 20, description: 'most areas audited (default 4)' },
      maxFindings: { type: 'integer', minimum: 1, maximum: 20, description: 'most findings verified per area (default 4)' },
      focus: { type: 'string', description: 'what to look for (default: bugs, security and robustness)' },
    },
    // An argument the script does not know is refused, so a misspelt knob is not ignored.
    additionalProperties: false,
    required: ['model'],
  },
};

// Defaults keep a run at 1 + 4 areas + 4 x 4 findings = 21 agent calls at most; the real
// count depends on how many findings the auditors report.
const maxAreas = args.maxAreas ?? 4;
const maxFindings = args.maxFindings ?? 4;
const focus = args.focus ?? 'bugs, security problems and robustness issues';

phase('Plan');
let areas = args.areas;
if (!areas) {
  areas = await agent(
    `Split this repository into at most ${maxAreas} areas worth auditing separately ` +
      '(folders or modules), most important first. Answer with their paths.',
    {
      model: args.model,
      label: 'plan',
      schema: { type: 'array', items: { type: 'string', minLength: 1 }, minItems: 1, maxItems: maxAreas },
    },
  );
}
areas = areas.slice(0, maxAreas);

phase('Audit');
const findingSchema = {
  type: 'array',
  items: {
    type: 'object',
    properties: {
      file: { type: 'string' },
      line: { type: 'integer', minimum: 0 },
      problem: { type: 'string' },
      evidence: { type: 'string' },
    },
    required: ['file', 'problem', 'evidence'],
  },
  maxItems: maxFindings,
};
const reports = await parallel(
  areas.map((area) => () =>
    agent(
      `Audit ${area} in this repository for ${focus}. Report at most ${maxFindings} findings, ` +
        'most serious first, each with the evidence (the code that shows it).',
      { model: args.model, label: `audit:${area}`, schema: findingSchema },
    ),
  ),
);

phase('Refute');
// The verifier is asked to disprove the finding, not to confirm it: an agent asked "is this
// real?" tends to agree.
const claims = areas.flatMap((area, a) =>
  (reports[a] ?? []).slice(0, maxFindings).map((finding, n) => ({ area, n, finding })),
);
const verdicts = await parallel(
  claims.map(({ area, n, finding }) => () =>
    agent(
      `An auditor claims this about ${finding.file}${finding.line ? `:${finding.line}` : ''}:\n\n` +
        `${finding.problem}\n\nEvidence given: ${finding.evidence}\n\n` +
        'Try to refute it: read the code, its callers and its tests. Answer real=false when the ' +
        'claim is wrong or cannot happen, real=true only when you could not refute it.',
      {
        model: args.verifierModel ?? args.model,
        label: `refute:${area}:${n}`,
        schema: {
          type: 'object',
          properties: { real: { type: 'boolean' }, reason: { type: 'string' } },
          required: ['real', 'reason'],
        },
      },
    ),
  ),
);

phase('Report');
// A verifier that failed (null) confirms nothing: the report holds only what survived.
const confirmed = claims
  .map((claim, i) => ({ ...claim.finding, area: claim.area, verdict: verdicts[i] }))
  .filter((entry) => entry.verdict?.real === true)
  .map(({ verdict, ...finding }) => ({ ...finding, why: verdict.reason }));
return { areas, reported: claims.length, confirmed };
