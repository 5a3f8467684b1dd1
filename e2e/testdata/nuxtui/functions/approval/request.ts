export const config = defineFunctionConfig({
  queue: { name: 'approvals' },
  flow: { name: 'approval', role: 'entry', step: 'request', emits: ['approval.requested'] },
})

export default defineFunction(async (input, ctx) => {
  await ctx.flow.emit('approval.requested', { amount: input?.amount ?? 0 })
  return { requested: true }
})
