export * from './world.ts';
