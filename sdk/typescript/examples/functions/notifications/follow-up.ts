export const config = defineFunctionConfig({
  queue: { name: 'notifications' },
  flow: {
    name: 'notification',
    role: 'step',
    step: 'follow-up',
    subscribes: ['notification.sent'],
  },
})

export default defineFunction(async (input: Record<string, { recipient: string }>, ctx) => {
  const sent = input['notification.sent']
  ctx.logger.log('info', 'Following up', { recipient: sent?.recipient, waited: ctx.resume?.awaitType })
  // After the time await of send-notification's awaitAfter: resume says so.
  await ctx.state.set('followedUp', { recipient: sent?.recipient, after: ctx.resume?.awaitType })
  return { followedUp: true }
})
