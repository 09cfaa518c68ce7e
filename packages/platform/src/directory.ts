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
 * The roles that submit tickets and follow up on them, and the pack each opens
 * (docs/product/users-and-tools.md#users): a representative the support pack, an engineer, who
 * holds the change scopes, the change pack. Approvers, operators and policy owners act through
 * their own surfaces, never as a run's requester.
 */
const REQUESTER_PACKS: Readonly<Record<string, string>> = { rep: 'support', engineer: 'change' };

/**
 * The pack the verified caller may open runs of at intake: from the identity directory's role of
 * the user in the token's tenant (`'support'` for a rep, `'change'` for an engineer), or undefined
 * when the directory does not know the user as a requester. The token's `roles` claim is not read
 * (as for {@link isDirectoryOperator}); a run of the other pack would only have every action
 * denied for want of the scopes, so it is refused at intake instead (docs/decisions/0675).
 */
export function requesterPack(user: UserClaims): string | undefined {
  const role = directoryRole(user);
  return role === undefined ? undefined : REQUESTER_PACKS[role];
}
