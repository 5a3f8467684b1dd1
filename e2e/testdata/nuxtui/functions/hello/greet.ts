// A v0.5 step file as a Nuxt app keeps it: the define functions are Nuxt
// auto-imports, so there is no import line.
export const config = defineFunctionConfig({
  queue: { name: 'hello' },
  flow: { name: 'hello', role: 'entry', step: 'greet', emits: ['greeted'] },
})

export default defineFunction(async (input, ctx) => {
  const who = typeof input?.name === 'string' ? input.name : 'world'
  ctx.logger.log('info', 'greeting', { who })
  await ctx.flow.emit('greeted', { who })
  return { greeted: who }
})
