// A first workflow: two agents in parallel, then one that combines their answers.
// Run it with a real backend (e.g. model: 'claude') or the mock agent from the README.
export const meta = {
  name: 'hello',
  description: 'Two agents answer in parallel; a third combines them',
  model: 'mock',
  phases: [{ title: 'Ask' }, { title: 'Combine' }],
};

phase('Ask');
const [first, second] = await parallel([
  () => agent(`Say hello to ${args.name ?? 'the world'} in one word.`),
  () => agent('Name one colour.'),
]);
log('answers:', first, second);

phase('Combine');
const summary = await agent(`Combine these into one short line: ${first} / ${second}`);
return { first, second, summary };
