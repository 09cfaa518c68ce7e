import { loadWorld, testFaults } from '@gatehouse/contracts';
import type { UserClaims } from '@gatehouse/credentials';

/** The role that may run ops commands and enter the ops dashboard (docs/product/users-and-tools.md#users). */
export const OPERATOR_ROLE = 'operator';

/**
 * Test-only switch `GATEHOUSE_TEST_OPERATOR_FROM_TOKEN=1`: trust the token's `roles` claim
 * instead of the directory (control-removed test).
 * @throws Error when set outside `GATEHOUSE_ENV=test`.
 */
function operatorFromToken(): boolean {
  return testFaults().operatorFromToken;
}

/**
 * Whether the verified caller is an operator: the identity directory (world.json, or
 * `GATEHOUSE_WORLD`) must know the user in the token's tenant with role `operator`. A token's
 * `roles` claim alone never grants operator authority (docs/decisions/0180-strict-production-mode.md).
 */
export function isDirectoryOperator(user: UserClaims): boolean {
  if (operatorFromToken()) return user.roles.includes(OPERATOR_ROLE);
  return directoryRole(user) === OPERATOR_ROLE;
}

/** The directory's role of the verified caller: the user of the token's `sub` in its tenant, or undefined. */
function directoryRole(user: UserClaims): string | undefined {
  return loadWorld().users.find((u) => u.id === user.sub && u.tenant === user.tenant)?.role;
}

/**
 * The roles that submit tickets and follow up on them (docs/product/users-and-tools.md#users: a
 * representative for the support pack; an engineer, who holds the change scopes, for the change pack). Approvers, operators and
 * policy owners act through their own surfaces, never as a run's requester.
 */
export const REQUESTER_ROLES: readonly string[] = ['rep', 'engineer'];

/**
 * Whether the verified caller may open a run at intake: the identity directory must know the
 * user in the token's tenant with one of {@link REQUESTER_ROLES}. The token's `roles` claim is
 * not read (as for {@link isDirectoryOperator}).
 */
export function isDirectoryRequester(user: UserClaims): boolean {
  const role = directoryRole(user);
  return role !== undefined && REQUESTER_ROLES.includes(role);
}
