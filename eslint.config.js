// ESLint flat config: typescript-eslint with type information for the promise rules
// (no-floating-promises, no-misused-promises): a promise is awaited or handled, never dropped.
import js from '@eslint/js';
import tseslint from 'typescript-eslint';
import importX from 'eslint-plugin-import-x';

export default tseslint.config(
  { ignores: ['**/node_modules/**', '.tools/**', '.gatehouse/**', 'coverage/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    files: ['**/*.ts'],
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': ['error', { checksVoidReturn: { arguments: false } }],
      '@typescript-eslint/no-unused-vars': [
        'error',
        { argsIgnorePattern: '^_', varsIgnorePattern: '^_', destructuredArrayIgnorePattern: '^_' },
      ],
    },
  },
  // Every import is declared by the workspace package that makes it (its nearest package.json):
  // an import that only resolves through another package's or the root's dependencies breaks
  // the day that one drops it. Tests, benchmarks and scripts may use devDependencies.
  {
    files: ['**/*.ts', '**/*.js'],
    plugins: { 'import-x': importX },
    rules: {
      'import-x/no-extraneous-dependencies': [
        'error',
        {
          devDependencies: ['**/test/**', 'bench/**', '**/scripts/**', '*.config.{ts,js}', 'migrations/test/**'],
          includeTypes: false,
        },
      ],
    },
  },
);
