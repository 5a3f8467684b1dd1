// A v0.5 step file (server/functions/**), as a Nuxt app has it: the
// auto-imports need no import line.
export const config = defineFunctionConfig({
  queue: {
    name: 'approvals',
    defaultJobOptions: { attempts: 2, backoff: { type: 'fixed', delay: 100 } },
  },
  flow: {
    name: 'webhook-approval',
    role: 'entry',
    step: 'request-approval',
    emits: ['approval.requested'],
    triggers: {
      define: {
        name: 'manual.webhook-approval',
        type: 'manual',
        scope: 'flow',
        displayName: 'Request an approval',
      },
      subscribe: ['manual.webhook-approval'],
      mode: 'auto',
    },
  },
})

export default defineFunction(async (input: { requestedBy?: string, amount?: number }, ctx) => {
  ctx.logger.log('info', 'Approval requested', { requestedBy: input.requestedBy, amount: input.amount })
  await ctx.flow.emit('approval.requested', { requestedBy: input.requestedBy ?? 'unknown', amount: input.amount ?? 0 })
  return { requested: true }
})
