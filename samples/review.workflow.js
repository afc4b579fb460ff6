export const meta = { name: 'review', description: 'Review the source files under a folder', model: 'mine' };
const files = await agent(`List at most five source files under ${args.path}, as paths.`, {
  schema: { type: 'array', items: { type: 'string' }, maxItems: 5 },
});
if (!(await checkpoint(`Review these ${files.length} files? ${files.join(', ')}`))) return { files, reviews: [] };
const reviews = await parallel(files.map((file) => () => agent(`Review ${file} and list its defects.`, { label: `review ${file}` })));
return { files, reviews };
