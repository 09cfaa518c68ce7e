export * from './page.ts';
export * from './session.ts';
