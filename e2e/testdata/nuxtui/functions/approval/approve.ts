// Waits for a webhook before it runs; the webhook's body is ctx.trigger.
export const config = defineFunctionConfig({
  queue: { name: 'approvals' },
  flow: {
    name: 'approval',
    role: 'step',
    step: 'approve',
    subscribes: ['approval.requested'],
    awaitBefore: { type: 'webhook', timeout: 600000 },
  },
})

export default defineFunction(async (input, ctx) => {
  return { approvedBy: ctx.trigger?.approvedBy ?? null }
})
