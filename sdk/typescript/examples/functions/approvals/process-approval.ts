// A v0.5 step that waits for a webhook call before it runs: the call's body
// is ctx.trigger. This one imports the auto-imports, as a Nuxt app may.
import { defineFunction, defineFunctionConfig } from '#imports'

export const config = defineFunctionConfig({
  queue: { name: 'approvals' },
  flow: {
    name: 'webhook-approval',
    role: 'step',
    step: 'process-approval',
    subscribes: ['approval.requested'],
    emits: ['approval.processed'],
    awaitBefore: {
      type: 'webhook',
      method: 'POST',
      timeout: 24 * 60 * 60 * 1000,
      timeoutAction: 'fail',
    },
  },
})

export default defineFunction(async (input: Record<string, { requestedBy: string, amount: number }>, ctx) => {
  const approval = ctx.trigger as { approved?: boolean, comment?: string } | undefined
  const request = input['approval.requested']
  ctx.logger.log('info', 'Processing approval', { approved: approval?.approved, request })
  if (approval?.approved !== true) {
    throw new Error(`Approval denied: ${approval?.comment ?? 'no reason given'}`)
  }
  await ctx.state.set('approval', { by: request?.requestedBy, amount: request?.amount, comment: approval.comment })
  await ctx.flow.emit('approval.processed', { amount: request?.amount })
  return { approved: true }
})
