// The UI draws a flow's diagram and steps from a module generated at build
// time from the app's own step files. This one takes them from nqd instead
// (GET /api/_flows at NQD_URL), in the same three exports. Added when every
// module is done, it replaces the one the nvent module generates.
import { addTemplate, defineNuxtModule } from '@nuxt/kit'

export default defineNuxtModule({
  setup(_options, nuxt) {
    nuxt.hook('modules:done', () => {
      addTemplate({
        filename: 'analyzed-flows.mjs',
        write: true,
        async getContents() {
          const url = process.env.NQD_URL
          const flows = url ? await (await fetch(`${url}/api/_flows`)).json() : []
          return [
            `export const analyzedFlows = ${JSON.stringify(flows)}`,
            'export function useAnalyzedFlows() { return analyzedFlows }',
            'export default useAnalyzedFlows',
            '',
          ].join('\n')
        },
      })
    })
  },
})
