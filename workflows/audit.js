// Audit a codebase area by area, then send every finding to an adversarial verifier whose
// job is to refute it; only the findings that survive are reported. Copy it with
// `agentprism workflows show audit --copy` to change what the audit looks for.
export const meta = {
  name: 'audit',
  description: 'Audit a codebase fanned out by area, with an adversarial verifier trying to refute each finding',
  whenToUse: 'When you want a list of real problems in a codebase (bugs, security holes, risky code) and would rather have fewer findings than false ones.',
  phases: [
    { title: 'Plan', detail: 'split the codebase into areas (skipped when areas are given)' },
    { title: 'Audit', detail: 'one auditor per area' },
    { title: 'Refute', detail: 'one verifier per finding tries to prove it wrong' },
    { title: 'Report', detail: 'the confirmed findings, most severe first' },
  ],
  inputSchema: {
    type: 'object',
    properties: {
      model: { type: 'string', description: 'Backend (or backend/model) the auditors use' },
      verifierModel: { type: 'string', description: 'Backend (or backend/model) for the verifiers; defaults to model' },
      focus: { type: 'string', description: 'What to look for (default: bugs, security problems and risky code)' },
      areas: { type: 'array', items: { type: 'string' }, description: 'Areas to audit, e.g. folders; planned by an agent when absent' },
      maxAreas: { type: 'integer', minimum: 1, maximum: 20, default: 4 },
      maxFindingsPerArea: { type: 'integer', minimum: 1, maximum: 10, default: 3 },
    },
    required: ['model'],
  },
};

const maxAreas = args.maxAreas ?? 4;
const maxFindings = args.maxFindingsPerArea ?? 3;
const focus = args.focus ?? 'bugs, security problems and risky code';
const verifierModel = args.verifierModel ?? args.model;
const severities = ['critical', 'high', 'medium', 'low'];

phase('Plan');
const areas = (args.areas ?? (await agent(
  `List at most ${maxAreas} areas of this repository to audit separately for ${focus}: folders or components, as short paths or names.`,
  { label: 'plan', model: args.model, schema: { type: 'array', items: { type: 'string' }, minItems: 1, maxItems: maxAreas } },
)) ?? []).slice(0, maxAreas);

phase('Audit');
const finding = {
  type: 'object',
  properties: {
    title: { type: 'string' },
    file: { type: 'string' },
    severity: { type: 'string', enum: severities },
    evidence: { type: 'string', description: 'the code and the reasoning that show the problem' },
  },
  required: ['title', 'file', 'severity', 'evidence'],
};
const audits = await parallel(areas.map((area) => () =>
  agent(
    `Audit ${area} in this repository for ${focus}. Report at most ${maxFindings} findings, each with the file and the evidence.`,
    { label: `audit:${area}`, model: args.model, schema: { type: 'object', properties: { findings: { type: 'array', items: finding, maxItems: maxFindings } }, required: ['findings'] } },
  )));

phase('Refute');
const claims = areas.flatMap((area, i) => (audits[i]?.findings ?? []).slice(0, maxFindings).map((item, n) => ({ area, n: n + 1, ...item })));
const checked = await parallel(claims.map((claim) => async () => {
  const verdict = await agent(
    `An auditor claims this problem in ${claim.area}:\n\n${JSON.stringify(claim, null, 2)}\n\n` +
      'Try hard to refute it: read the code, look for the guard or the caller that makes it harmless. ' +
      'Answer real: true only if you could not refute it.',
    { label: `refute:${claim.area}:${claim.n}`, model: verifierModel, schema: { type: 'object', properties: { real: { type: 'boolean' }, reason: { type: 'string' } }, required: ['real', 'reason'] } },
  );
  return { ...claim, real: verdict?.real === true, reason: verdict?.reason ?? 'the verifier did not answer' };
}));

phase('Report');
const confirmed = checked.filter((item) => item?.real).sort((a, b) => severities.indexOf(a.severity) - severities.indexOf(b.severity));
return { areas, confirmed, refuted: checked.filter((item) => item && !item.real).map(({ area, title, reason }) => ({ area, title, reason })) };
