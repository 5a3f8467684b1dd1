// Runs once both stock and payment are done (fan-in), and only after a person
// approved the order: nqd registers a trigger await and runs the step with the
// trigger's payload in ctx.resume once someone POSTs it.

interface ApproveInput {
  'stock.checked': { reserved: number }
  'payment.charged': { orderId: string, amount: number }
}

export const config = defineQueueConfig({
  queue: { name: 'orders' },
  flow: {
    name: ['orders'],
    role: 'step',
    step: 'approve',
    subscribes: ['stock.checked', 'payment.charged'],
    emits: ['order.approved'],
    await: {
      type: 'trigger',
      triggerType: 'user',
      timeout: 24 * 60 * 60 * 1000,
      schema: { type: 'object', properties: { approved: { type: 'boolean' }, by: { type: 'string' } }, required: ['approved'] },
    },
  },
})

export default defineQueueWorker(async (input: ApproveInput, ctx) => {
  const decision = ctx.resume?.payload as { approved: boolean, by?: string } | undefined
  if (decision?.approved !== true) {
    throw new PermanentError(`order ${input['payment.charged'].orderId} was not approved`)
  }
  ctx.logger.info(`Approved by ${decision.by ?? 'someone'}`)
  await ctx.flow.emit('order.approved', { orderId: input['payment.charged'].orderId, by: decision.by })
  return { approved: true }
})
