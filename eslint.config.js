// ESLint (flat config): typescript-eslint's recommended rules over the TypeScript sources, tests,
// benchmarks and configs; formatting is Prettier's job (npm run lint runs both).
import js from '@eslint/js';
import globals from 'globals';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  {
    ignores: [
      'node_modules/',
      'build/',
      'build-asan/',
      'dist/',
      'test/fixtures/',
      'bench/results/',
      'src/zds/zds-static.js',
      'src/zds/zds-static.d.ts',
    ],
  },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: { globals: globals.node },
    linterOptions: { reportUnusedDisableDirectives: 'error' },
    rules: {
      // A leading underscore marks a binding that is unused on purpose (a parameter a signature
      // requires, a field dropped by destructuring with a rest sibling), as tsc's noUnused* allow.
      '@typescript-eslint/no-unused-vars': [
        'error',
        { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrorsIgnorePattern: '^_', ignoreRestSiblings: true },
      ],
      // The input checks reject control characters on purpose (/[\x00-\x1f]/ in names, paths and
      // annotation values); the rule exists to catch them by accident.
      'no-control-regex': 'off',
    },
  },
);
