export const config = defineFunctionConfig({
  queue: { name: 'hello' },
  flow: { name: 'hello', role: 'step', step: 'reply', subscribes: ['greeted'] },
})

export default defineFunction(async (input, ctx) => {
  ctx.logger.log('info', 'replying')
  return { reply: 'hello back' }
})
