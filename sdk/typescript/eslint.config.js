// @ts-check
import js from '@eslint/js'
import tseslint from 'typescript-eslint'

const nuxtQueueGlobals = {
  defineQueueConfig: 'readonly', defineQueueWorker: 'readonly', PermanentError: 'readonly',
  defineFunctionConfig: 'readonly', defineFunction: 'readonly', defineTriggerConfig: 'readonly',
  defineAwaitRegisterHook: 'readonly', defineAwaitResolveHook: 'readonly', defineAwaitTimeoutHook: 'readonly',
}

export default tseslint.config(
  { ignores: ['dist/', 'build-test/', 'node_modules/', '.test-bin/'] },
  js.configs.recommended,
  {
    files: ['src/**/*.ts'],
    extends: [tseslint.configs.strictTypeChecked],
    languageOptions: {
      parserOptions: { project: './tsconfig.test.json', tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      '@typescript-eslint/restrict-template-expressions': ['error', { allowNumber: true }],
    },
  },
  {
    files: ['test/**/*.ts'],
    extends: [tseslint.configs.recommendedTypeChecked],
    languageOptions: {
      parserOptions: { project: './tsconfig.test.json', tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      '@typescript-eslint/no-floating-promises': ['error', {
        allowForKnownSafeCalls: [{ from: 'package', package: 'node:test', name: ['describe', 'it', 'test'] }],
      }],
    },
  },
  {
    // Example step files are Nuxt Queue step files: the auto-imports are globals.
    files: ['examples/**/*.ts', 'examples/**/*.js', 'test/fixtures/**/*.js'],
    extends: [tseslint.configs.recommended],
    languageOptions: { globals: nuxtQueueGlobals },
  },
  {
    files: ['**/*.js', '**/*.mjs'],
    languageOptions: {
      globals: { process: 'readonly', console: 'readonly', setTimeout: 'readonly', URL: 'readonly', fetch: 'readonly', performance: 'readonly' },
    },
  },
)
