// A v0.5 entry step with awaitAfter: the steps its emit makes due wait a
// little before they run.
export const config = defineFunctionConfig({
  queue: { name: 'notifications' },
  flow: {
    name: 'notification',
    role: 'entry',
    step: 'send-notification',
    emits: ['notification.sent'],
    awaitAfter: { type: 'time', delay: 300 },
  },
})

export default defineFunction(async (input: { recipient?: string }, ctx) => {
  ctx.logger.log('info', 'Sending notification', { recipient: input.recipient })
  await ctx.flow.emit('notification.sent', { recipient: input.recipient ?? 'nobody', sentAt: Date.now() })
  return { sent: true }
})
